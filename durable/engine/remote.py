"""Remote replies: work on another machine reports back through the bucket.

A step that hands work to another process (with no access to the queue,
only to the bucket, and no inbound endpoint on this process) waits for the
answer as a durable signal:

1. The step registers the reply it expects, durably, *before* it sends the
   request: `ReplyWatcher.expect` writes a pending marker naming the reply
   key and the correlation key. Then it sends the request (with the reply
   key) and returns ``StepOutcome.continue_on_signal(payload, key, timeout)``;
   the step settles and no lease is held while the remote work runs.
2. The remote worker writes one object at the reply key (an atomic PUT:
   `durable.store.objects.open_object_store` or plain fsspec).
3. A `ReplyWatcher` (`ReplyWatcher.spawn`) polls every ``interval`` seconds
   of the runtime's clock: it lists the pending markers (an in-memory KV
   scan, no LIST on the bucket), probes each reply object (one GET), and
   signals the correlation key with the reply's bytes; then it deletes the
   reply object and the marker. The next step reads the reply as
   ``Step.signal``, or None when the timeout came first.

Layout (a marker is a KV entry, a reply an object in the store's bucket):

| where | what |
|---|---|
| KV ``workflow/replies/{reply_key}`` | marker: correlation key, ``pending``/``delivered`` |
| object ``{reply_key}`` (under ``replies/``) | the reply, written by the remote worker |

Crash safety. The watcher buffers the signal and flips the marker to
``delivered`` in one commit (`Signals.signal_with`), then wakes the
waiter, then cleans up. A crash before that commit changes nothing (the
next pass delivers); after it, the next pass never signals the reply again:
it only hands whatever is still buffered under the key to its waiter
(`Signals.wake_buffered`), then cleans up. So each reply is signalled once:
a run already resumed by it is not resumed again, and no stale copy is
left buffered for a later waiter. A reply that arrives before its step has
settled is buffered and consumed when the wait registers.

At least once, still: a requesting step delivered twice sends two
requests. Use a reply key and correlation key unique to the run and step
(`ReplyWatcher.reply_key`, `ReplyWatcher.correlation_key`); the second
reply then lands in a buffer no waiter reads (`WorkflowRuntime.clear_signal`
drops it). A step that gives up (its timeout fired) calls
`ReplyWatcher.discard` so a late reply is not delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from durable._logging import get_logger
from durable.engine import keys
from durable.engine.signals import SignalOutcome, check_signal
from durable.errors import CorruptEngineRecord, InvalidArgument, ObjectNotFound
from durable.store.objects.base import ObjectStore
from durable.store.queue import SettlementEffects

if TYPE_CHECKING:
    from durable.engine.runtime import WorkflowRuntime

__all__ = [
    "DEFAULT_REPLY_PREFIX",
    "ReplyMarker",
    "ReplyState",
    "ReplyWatcher",
    "ReplyWatcherHandle",
    "decode_reply_marker",
    "encode_reply_marker",
]

log = get_logger("durable.engine.remote")

#: Where reply objects go unless a `ReplyWatcher` is told otherwise.
DEFAULT_REPLY_PREFIX = "replies/"
_VERSION = 1


class ReplyState(enum.Enum):
    """Where a pending marker is; stored as its lowercase value."""

    #: Waiting for the reply object.
    PENDING = "pending"
    #: The reply was buffered as the signal; cleanup (wake, deletes) may remain.
    DELIVERED = "delivered"


@dataclass(frozen=True, slots=True)
class ReplyMarker:
    """A pending marker: the correlation key a reply is signalled to, and its state."""

    correlation_key: str
    state: ReplyState = ReplyState.PENDING


def encode_reply_marker(marker: ReplyMarker) -> bytes:
    """The stored bytes of ``marker`` (a MessagePack map with a version)."""
    body = {"v": _VERSION, "key": marker.correlation_key, "state": marker.state.value}
    return msgpack.packb(body, use_bin_type=True)


def decode_reply_marker(data: bytes) -> ReplyMarker:
    """Decode a marker; `CorruptEngineRecord` if ``data`` is not one."""
    try:
        m = msgpack.unpackb(data, raw=False)
        if not isinstance(m, dict) or m.get("v") != _VERSION:
            raise ValueError("not a reply marker of a known version")
        key = m["key"]
        if not isinstance(key, str):
            raise TypeError(f"its key is {key!r:.80}, not a str")
        return ReplyMarker(key, ReplyState(m["state"]))
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord("reply marker", str(e) or type(e).__name__) from None


class ReplyWatcherHandle:
    """A running `ReplyWatcher` loop; `shutdown` stops it."""

    def __init__(self, task: asyncio.Task[None], watcher: ReplyWatcher) -> None:
        self._task = task
        self._watcher = watcher

    async def shutdown(self) -> None:
        """Stop polling: a pass in progress ends first (a reply it delivered
        is cleaned up too), then the wait for the next pass is cut short.
        Cancelling the caller cancels the pass (the next one redoes it)."""
        watcher = self._watcher
        watcher._stopping = True
        if not self._task.done():
            await watcher._between_passes.wait()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    @property
    def running(self) -> bool:
        """True until the loop has stopped."""
        return not self._task.done()


class ReplyWatcher:
    """Delivers reply objects under ``prefix`` as signals of ``runtime``.

    ``objects`` is where replies are written (default: the runtime's own
    store); ``interval`` the seconds of the runtime's clock between passes.
    See the module docstring for the flow and its guarantees.
    """

    def __init__(
        self,
        runtime: WorkflowRuntime,
        *,
        objects: ObjectStore | None = None,
        prefix: str = DEFAULT_REPLY_PREFIX,
        interval: float = 1.0,
    ) -> None:
        if not isinstance(prefix, str) or not prefix.endswith("/") or prefix.startswith("/"):
            raise InvalidArgument(
                f"the reply prefix must be a relative object path ending in '/', got {prefix!r}"
            )
        if not isinstance(interval, int | float) or not interval > 0:
            raise InvalidArgument(f"the watch interval must be > 0 seconds, got {interval!r}")
        self.runtime = runtime
        self.objects = objects if objects is not None else runtime.queue.writer.objects
        self.prefix = prefix
        self.interval = float(interval)
        self._stopping = False
        self._between_passes = asyncio.Event()
        self._between_passes.set()

    # ------------------------------------------------------------- naming

    def reply_key(self, run_id: str, step: int) -> str:
        """A reply key unique to step ``step`` of run ``run_id``."""
        return f"{self.prefix}{run_id}/{step}"

    @staticmethod
    def correlation_key(run_id: str, step: int) -> str:
        """A correlation key unique to step ``step`` of run ``run_id``."""
        return f"reply:{run_id}:{step}"

    def _check_reply_key(self, reply_key: object) -> str:
        if not isinstance(reply_key, str) or not reply_key.startswith(self.prefix):
            raise InvalidArgument(
                f"reply key {reply_key!r} must be an object name under {self.prefix!r}"
            )
        segments = reply_key[len(self.prefix) :].split("/")
        if any(s in ("", ".", "..") for s in segments) or "\0" in reply_key:
            raise InvalidArgument(
                f"reply key {reply_key!r}: segments must be non-empty, not '.' or '..', no NUL"
            )
        return reply_key

    # ------------------------------------------------------------ markers

    async def expect(self, reply_key: str, correlation_key: str) -> None:
        """Register that the reply at ``reply_key`` is signalled to
        ``correlation_key``; durable when this returns, so call it before
        sending the request. Idempotent for a marker still pending."""
        reply_key = self._check_reply_key(reply_key)
        correlation_key, _ = check_signal(correlation_key)
        marker = keys.reply_marker_key(reply_key)
        value = encode_reply_marker(ReplyMarker(correlation_key))
        if self.runtime.queue.kv.get(marker) != value:
            await self.runtime.queue.kv.put(marker, value)

    async def discard(self, reply_key: str, correlation_key: str) -> None:
        """Stop expecting the reply at ``reply_key``: remove its marker and
        reply object, and the signal of ``correlation_key`` if it is still
        buffered (a step whose wait timed out calls this). A reply written
        later stays in the bucket, undelivered."""
        reply_key = self._check_reply_key(reply_key)
        await self.runtime.queue.kv.delete(keys.reply_marker_key(reply_key))
        await self.objects.delete([reply_key])
        await self.runtime.clear_signal(correlation_key)

    async def pending(self) -> dict[str, ReplyMarker]:
        """The markers under this watcher's prefix: reply key -> marker
        (undecodable ones are logged and left out)."""
        out: dict[str, ReplyMarker] = {}
        prefix = keys.REPLY_MARKERS_PREFIX + self.prefix.encode()
        async for page in self.runtime.queue.kv.entries(prefix):
            for key, raw in page:
                name = key[len(keys.REPLY_MARKERS_PREFIX) :].decode(errors="replace")
                try:
                    out[name] = decode_reply_marker(raw)
                except CorruptEngineRecord as e:
                    log.error("undecodable reply marker skipped", reply_key=name, error=str(e))
        return out

    # ------------------------------------------------------------ polling

    async def poll_once(self) -> int:
        """One pass over the markers; how many it retired (replies delivered,
        or delivered before a crash and cleaned up now).

        An error on one marker is logged and leaves it for the next pass.
        """
        markers = await self.pending()
        bodies = await asyncio.gather(
            *(self._probe(name, m) for name, m in markers.items()), return_exceptions=True
        )
        delivered = 0
        for (name, marker), body in zip(markers.items(), bodies, strict=True):
            try:
                if isinstance(body, BaseException):
                    raise body
                if marker.state is ReplyState.DELIVERED or body is not None:
                    await self._settle(name, marker, body)
                    delivered += 1
            except Exception as e:
                log.warning("reply delivery failed", reply_key=name, error=str(e))
        return delivered

    async def _probe(self, name: str, marker: ReplyMarker) -> bytes | None:
        if marker.state is ReplyState.DELIVERED:
            return None  # signalled already: only the cleanup is left
        try:
            return await self.objects.get(name)
        except ObjectNotFound:
            return None

    async def _settle(self, name: str, marker: ReplyMarker, body: bytes | None) -> None:
        """Deliver ``body`` (a pending marker's reply) or finish a delivered
        marker, then clean up."""
        kv = self.runtime.queue.kv
        key = keys.reply_marker_key(name)
        signals = self.runtime.signals
        done = encode_reply_marker(ReplyMarker(marker.correlation_key, ReplyState.DELIVERED))
        outcome: SignalOutcome | None
        if body is not None:
            # Buffer the signal and retire the marker in one commit: from here
            # on the reply is never signalled again.
            flip = SettlementEffects().kv_put(key, done)
            outcome = await signals.signal_with(marker.correlation_key, body, flip)
        else:
            outcome = await signals.wake_buffered(marker.correlation_key)
        log.info(
            "reply delivered",
            reply_key=name,
            correlation_key=marker.correlation_key,
            outcome=outcome.value if outcome else "consumed",
        )
        await self.objects.delete([name])
        await kv.compare_delete(key, done)  # a marker expected again is kept

    async def run(self) -> None:
        """Poll until cancelled: a pass, then ``interval`` seconds of the clock."""
        while not self._stopping:
            self._between_passes.clear()
            try:
                await self.poll_once()
            except Exception as e:  # logged; the next pass retries
                log.error("reply watcher pass failed", error=str(e))
            finally:
                self._between_passes.set()
            await self.runtime.clock.sleep(self.interval)

    def spawn(self) -> ReplyWatcherHandle:
        """Start `run` as a task on this event loop (again after a `shutdown`)."""
        self._stopping = False
        task = asyncio.create_task(self.run(), name="durable-reply-watcher")
        return ReplyWatcherHandle(task, self)
