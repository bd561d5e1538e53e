"""Step results cached across runs: ``@step(cache_key=fn, cache_ttl=seconds)``.

As Prefect's cache policies: ``fn(*args, **kwargs) -> str`` is called with
the step's arguments when a run reaches the step (never on a replay: a
journaled position answers from the journal). A later run, any run on the
store, whose step has the same name and computes the same key reuses the
stored result until it expires (``cache_ttl`` seconds of the engine clock
after it was stored; without a ttl it never does) without running the
body; the reuse is journaled in that run like a result the body returned.

- **Errors are never cached**: a step that fails journals its error as
  always and leaves the cache as it was.
- **Atomic with the journal**: the cache record is put in the commit that
  journals the step's result (`RunContext.record` ``extra``), so there is
  never a cached value whose run did not record it.
- **Two runs at once with one key** may both run the body (nothing is
  locked while a body runs); the later commit's record replaces the
  earlier one. Each run journals its own result.
- **Bad input**: a key function that raises or returns something else
  than a ``str`` fails the step permanently with `CacheKeyError` naming
  the step (journaled like an error of the body; no retry).

Records, in the internal KV of the partition that holds the run:

- ``workflow/step-cache/<sha256(name NUL key)>``: a MessagePack map
  (``v`` format version, ``expires`` engine-clock ms, 0: never; ``ok`` the
  codec bytes of the result, or ``ref`` the name of a memo entry holding
  them when they are over `INLINE_MAX` bytes; ``run``/``position``: who
  stored it);
- ``workflow/step-cache-at/`` + expiry + digest: its `ExpiryIndex` entry.

A record is read only while unexpired (checked on read against the
engine clock). Expired records, and their memo entries, are swept by the
step-cache writes of the same partition: before a miss runs its body, a
bounded sweep (at most `SWEEP_MAX` records; nothing is read when none is
due) removes what has expired. Large results live in the memo namespace
of the pseudo run ``durable-step-cache`` (one object per record, written
before the commit that references it; absence reads as a miss).

**Partitioned stores**: a record lives in the partition of the run that
stored it (so it commits with that run's journal). A lookup reads the
run's own partition, then every other partition this process owns (in
memory): with one worker owning every partition, hits are store-wide;
with several workers, a run does not see records in partitions another
process owns, and the body may run once per owning process per ttl.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from durable._logging import get_logger
from durable.decorators.journal import INLINE_MAX
from durable.engine import memo_codec
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CacheKeyError, DecoratorError, ObjectStoreError
from durable.store.expiry import DeleteIf, ExpiryEntry, ExpiryIndex
from durable.store.kv import KvEffects

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.memo import Memo

__all__ = [
    "CACHE_INDEX_PREFIX",
    "CACHE_PREFIX",
    "SWEEP_MAX",
    "CachePolicy",
    "cache_key_of",
    "check_cache",
    "lookup",
    "record_key",
    "stage_record",
    "sweep",
]

log = get_logger("durable.decorators")

#: Where the cache records live (internal KV of the run's partition).
CACHE_PREFIX = RESERVED_KV_PREFIX + b"step-cache/"
#: The `ExpiryIndex` of the records that expire.
CACHE_INDEX_PREFIX = RESERVED_KV_PREFIX + b"step-cache-at/"
#: At most this many expired records are removed per sweep.
SWEEP_MAX = 64
#: The pseudo run whose memo namespace holds results over `INLINE_MAX` bytes.
MEMO_RUN = "durable-step-cache"
_VERSION = 1

#: Per queue object (one per partition owned): its cache's expiry index.
_INDEXES: weakref.WeakKeyDictionary[object, ExpiryIndex] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """How a step's results are cached: ``key`` computes the cache key from
    the step's arguments, ``ttl`` (seconds; None: never) says how long a
    stored result is reused."""

    key: Callable[..., str]
    ttl: float | None = None


def check_cache(step: str, cache_key: object, cache_ttl: object) -> CachePolicy | None:
    """The checked cache options of step ``step`` (None: not cached);
    `DecoratorError` naming the step otherwise."""
    what = f"@step {step!r}"
    if cache_key is None:
        if cache_ttl is not None:
            raise DecoratorError(
                f"{what}: cache_ttl={cache_ttl!r} needs cache_key=fn (the function that "
                "computes the key of a call from its arguments)"
            )
        return None
    if not callable(cache_key):
        raise DecoratorError(f"{what}: cache_key must be a function of the step's arguments")
    ttl: float | None = None
    if cache_ttl is not None:
        if isinstance(cache_ttl, bool) or not isinstance(cache_ttl, int | float):
            raise DecoratorError(f"{what}: cache_ttl must be seconds, got {cache_ttl!r}")
        if not 0 < cache_ttl < math.inf:
            raise DecoratorError(f"{what}: cache_ttl must be > 0 seconds, got {cache_ttl!r}")
        ttl = float(cache_ttl)
    return CachePolicy(cache_key, ttl)


def cache_key_of(
    policy: CachePolicy,
    step: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    run_id: str,
    position: int,
) -> str:
    """The cache key of a call of step ``step``; `CacheKeyError` if the key
    function raises or returns something else than a ``str``."""
    try:
        key = policy.key(*args, **kwargs)
    except Exception as e:
        raise CacheKeyError(run_id, position, step, f"raised {type(e).__name__}: {e}") from e
    if not isinstance(key, str):
        raise CacheKeyError(
            run_id, position, step, f"returned a {type(key).__name__}, not a str: {key!r:.80}"
        )
    return key


def _digest(step: str, key: str) -> bytes:
    data = f"{step}\x00{key}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest().encode()


def record_key(step: str, key: str) -> bytes:
    """The KV key of the cache record of step ``step`` under ``key``."""
    return CACHE_PREFIX + _digest(step, key)


def _encode(m: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb({"v": _VERSION, **m}, use_bin_type=True)
    return packed


def _decode(raw: bytes) -> dict[str, Any] | None:
    """A record's map, or None (with a warning) when it cannot be read: a
    miss, the body runs and the next write replaces it."""
    try:
        m = msgpack.unpackb(raw, raw=False)
        if not isinstance(m, dict) or not isinstance(m.get("v"), int) or m["v"] > _VERSION:
            raise ValueError(f"not a step-cache record of version {_VERSION}")
        if not isinstance(m.get("expires", 0), int):
            raise ValueError("expires is not an int")
        if not isinstance(m.get("ok"), bytes) and not isinstance(m.get("ref"), str):
            raise ValueError("neither ok nor ref")
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        log.warning("step-cache record unreadable, treated as a miss", error=str(e))
        return None
    return m


def _memo(engine: EngineBase) -> Memo:
    return engine.workflows.default.memos.run_memo(MEMO_RUN)


def _partitions(engine: EngineBase) -> list[EngineBase]:
    """The run's partition (``engine``), then every other one owned here."""
    from durable.decorators.partitioned import PartitionEngine

    if not isinstance(engine, PartitionEngine):
        return [engine]
    others = [
        p
        for p in engine.engine.every_partition()
        if p is not engine and isinstance(p, PartitionEngine) and p.owner
    ]
    return [engine, *others]


async def lookup(engine: EngineBase, step: str, key: str, now_ms: int) -> bytes | None:
    """The stored, unexpired result (codec bytes) of step ``step`` under
    ``key`` as of ``now_ms``, or None (a miss)."""
    name = record_key(step, key)
    for part in _partitions(engine):
        raw = part.queue.kv.internal().get(name)
        if raw is None:
            continue
        m = _decode(raw)
        if m is None:
            continue
        expires = m.get("expires", 0)
        if expires and expires <= now_ms:
            continue
        ok = m.get("ok")
        if isinstance(ok, bytes):
            return ok
        stored = await _memo(part).get(m["ref"])
        if isinstance(stored, bytes):
            return stored
    return None


async def stage_record(
    engine: EngineBase,
    step: str,
    key: str,
    policy: CachePolicy,
    ok: bytes,
    run_id: str,
    position: int,
) -> Callable[[], dict[bytes, bytes]]:
    """Prepare the cache record of a result ``ok`` of step ``step`` stored by
    run ``run_id`` at ``position``: writes a large value to its memo entry
    first (durable on return), and returns the function that gives the KV
    puts to commit with the journal entry (call it in the synchronous
    section that stages that commit: it reads the clock and lowers the
    expiry index's bound)."""
    ref: str | None = None
    if len(ok) > INLINE_MAX:
        ref = f"{_digest(step, key).decode()}/{run_id}/{position}"
        await _memo(engine).put(ref, ok)
    index = _index(engine)
    clock = engine.clock

    def puts() -> dict[bytes, bytes]:
        now = clock.now_ms()
        expires = 0 if policy.ttl is None else now + max(1, round(policy.ttl * 1000))
        m: dict[str, Any] = {"expires": expires, "run": run_id, "position": position}
        m.update({"ref": ref} if ref is not None else {"ok": ok})
        out = {record_key(step, key): _encode(m)}
        if expires:
            out[index.entry_key(expires, _digest(step, key))] = b""
        return out

    return puts


def _index(engine: EngineBase) -> ExpiryIndex:
    queue = engine.queue
    index = _INDEXES.get(queue)
    if index is None:
        index = _INDEXES[queue] = ExpiryIndex(queue.kv.internal(), CACHE_INDEX_PREFIX)
    return index


class _Enough(Exception):
    """Ends a sweep once it removed `SWEEP_MAX` records (the bound stays)."""


async def sweep(engine: EngineBase, now_ms: int, limit: int = SWEEP_MAX) -> int:
    """Remove at most ``limit`` cache records of ``engine``'s partition that
    expired by ``now_ms`` (and their memo entries); how many index entries
    went. Reads nothing while none is due."""
    kv = engine.queue.kv.internal()
    removed = 0

    async def expire(entry: ExpiryEntry) -> DeleteIf:
        nonlocal removed
        if removed >= limit:
            raise _Enough
        removed += 1
        name = CACHE_PREFIX + entry.suffix
        raw = kv.get(name)
        m = None if raw is None else _decode(raw)
        if m is not None and m.get("expires", 0) != entry.at_ms:
            return DeleteIf(name, raw)  # replaced since: only this index entry goes
        if m is not None and isinstance(m.get("ref"), str):
            memos = engine.workflows.default.memos
            scope = memo_codec.run_scope(memos.prefix, MEMO_RUN)
            try:
                await memos.objects.delete([scope + memo_codec.key_hash(m["ref"])])
            except ObjectStoreError as e:  # the record goes; the object leaks
                log.warning("step-cache memo entry not deleted", error=str(e))
        # Only the record read above (a write since then has its own entry).
        return DeleteIf(name, raw, KvEffects().delete(name) if raw is not None else None)

    try:
        return await _index(engine).sweep(now_ms, 0, expire)
    except _Enough:
        return limit
