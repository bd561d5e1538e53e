"""The single writer of a store: group commit, fencing, checkpoints.

A commit applies its batch to the in-memory `State` at once (so the next
transaction reads it) and joins the *open* group. One flusher writes the
open group as one log object, with create-if-absent under the next sequence
number, then releases every commit in it; while it writes, the next group
fills. A commit's awaitable resolves only once its group is on the store.

Fencing: a writer opens by creating an *open marker* at the next sequence
number. An older writer's next create then finds that name taken by bytes
that are not its own, and it fails every commit from then on with `Fenced`.
Markers are never deleted when the log is trimmed, so a fenced writer that
wakes up much later still finds its next name taken. An idle writer learns
it was fenced with `LogWriter.check_fenced`: one read of the name after its
last log object, which a newer writer's marker (or log) then holds.

Epochs: a partition's owner opens at the epoch the assignment table gave it
(``LogWriter.open(..., epoch=)``); its open marker carries the epoch, and
the log keeps the newest (`LogWriter.epoch`, carried by checkpoints). An
open at a lower epoch than the log's newest, found after loading or after
catching up with a writer that won the marker's sequence number, raises
`StaleEpoch` and writes nothing: a member acting on a superseded table
cannot fence the newer owner, so epochs never go backwards in a log. An
open without an epoch checks nothing and writes the marker as before.

Should a group fail to reach the store (after retries for transient errors,
or on fencing), the writer stops: memory now holds changes that may never be
durable, so every pending and later commit fails, and the store must be
reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from durable import events
from durable._logging import get_logger
from durable.errors import (
    CorruptObject,
    Fenced,
    MissingGuarantee,
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    SelfFenced,
    StaleEpoch,
    StoreClosed,
    StoreError,
    UnsupportedFormat,
)
from durable.store.idle import loop_idle
from durable.store.log.batch import WriteBatch
from durable.store.log.format import (
    CKPT_PREFIX,
    LOG_PREFIX,
    LogObject,
    ckpt_name,
    decode_log,
    encode_checkpoint,
    encode_log,
    log_name,
    newer_epoch,
)
from durable.store.log.loader import get_object, list_seqs, load
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, create_retrying, retry_transient
from durable.store.log.state import State
from durable.store.log.watch import KeyWatchers
from durable.store.objects.base import Guarantee, ObjectLock, ObjectStore

__all__ = ["PROBE_PREFIX", "Durable", "LogOptions", "LogStats", "LogWriter", "probe_atomic_create"]

log = get_logger("durable.store.log")

#: Where `probe_atomic_create` writes its short-lived objects.
PROBE_PREFIX = "probe/"
#: Checks of one open before the backend is refused (see `probe_atomic_create`).
_PROBE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class LogOptions:
    """Tuning of a `LogWriter`."""

    #: Checkpoint once this many bytes of log follow the last checkpoint, or
    #: the size of the last checkpoint if larger (bounds write amplification).
    checkpoint_min_bytes: int = 4 << 20
    #: Checkpoint once this many log objects follow the last one (bounds reopen).
    checkpoint_max_objects: int = 2000
    #: Keep retrying a transient write failure this long before the writer
    #: stops; also the window of every read, list, probe and delete at open.
    write_retry_seconds: float = DEFAULT_RETRY_SECONDS
    #: Write a final checkpoint at `LogWriter.close`.
    checkpoint_on_close: bool = True


@dataclass(slots=True)
class LogStats:
    """Counters of a writer since it opened."""

    commits: int = 0
    log_objects: int = 0
    log_bytes: int = 0
    checkpoints: int = 0
    write_retries: int = 0


class Durable:
    """Awaitable that resolves once a commit is on the store.

    Not awaiting it is allowed (a fire-and-forget commit): the commit is
    still written with its group. Cancelling a waiter does not cancel the
    write.
    """

    __slots__ = ("_fut",)

    def __init__(self, fut: asyncio.Future[int]) -> None:
        self._fut = fut

    def __await__(self) -> Generator[Any, None, int]:
        # `asyncio.shield`, leaner: a waiter of its own that a cancelled
        # caller cancels, the commit's future untouched.
        fut = self._fut
        if not fut.done():
            waiter: asyncio.Future[None] = fut.get_loop().create_future()
            fut.add_done_callback(functools.partial(_relay, waiter))
            yield from waiter
        return fut.result()

    def done(self) -> bool:
        """True once the commit is durable or has failed."""
        return self._fut.done()

    def error(self) -> BaseException | None:
        """Why the commit failed (once done), else None."""
        if not self._fut.done() or self._fut.cancelled():
            return None
        return self._fut.exception()

    def add_done_callback(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once the commit is durable or has failed."""
        self._fut.add_done_callback(lambda _fut: fn())


def _relay(waiter: asyncio.Future[None], _fut: asyncio.Future[int]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _fail_group(fut: asyncio.Future[int], failure: BaseException) -> None:
    """Fail a group's future, its exception marked retrieved at once:
    fire-and-forget commits are allowed (no done callback for that, which
    would be a callback per group to run)."""
    if not fut.done():
        fut.set_exception(failure)
        fut.exception()


class _Group:
    __slots__ = ("due", "durable", "future", "nbytes", "ops", "released")

    def __init__(self) -> None:
        self.ops: list[bytes | None] = []
        self.released: list[str] = []
        self.nbytes = 0
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.durable = Durable(self.future)
        #: When (loop time) this group's flush starts at the latest (lazy
        #: commits made `within`); None: when a flush is asked for.
        self.due: float | None = None


async def probe_atomic_create(
    objects: ObjectStore, retry_seconds: float = DEFAULT_RETRY_SECONDS
) -> None:
    """Check that a second create of one name fails; `MissingGuarantee` if not.

    Catches backends that accept a create-if-absent but do not honour it
    (gcp-storage-emulator, some proxies), before anything else is written.
    Every call retries transient errors for ``retry_seconds``. Once the
    check passes, every probe object is deleted: this one and any that a
    writer which crashed mid-probe left behind (only writers delete them).

    A writer opening at the same moment may delete this probe in the middle
    of its check; the second create then succeeds, as on a broken backend.
    So a failed check runs again under a new name (a concurrent sweep lists
    once, it cannot delete a name created after its listing), and only a
    backend that accepts the second create every time is refused.
    """
    for _ in range(_PROBE_ATTEMPTS):
        name = f"{PROBE_PREFIX}{os.urandom(12).hex()}"
        first = os.urandom(16)
        if await _second_create_refused(objects, name, first, retry_seconds):
            await _delete_probes(objects, name, retry_seconds)
            return
        await retry_transient(functools.partial(objects.delete, [name]), name, retry_seconds)
    raise MissingGuarantee(
        objects.url,
        Guarantee.ATOMIC_CREATE.value + " (a second create of one name was accepted)",
    )


async def _second_create_refused(
    objects: ObjectStore, name: str, first: bytes, retry_seconds: float
) -> bool:
    """Create ``name``, create it again: True if the second was refused and
    the first bytes stayed. A crash here leaves the probe to the next open."""
    if await create_retrying(objects, name, first, retry_seconds) is not None:
        return False  # someone else's bytes under our random name: check again
    try:
        await retry_transient(lambda: objects.create(name, b"second"), name, retry_seconds)
    except ObjectExists:
        try:
            return await get_object(objects, name, retry_seconds) == first
        except ObjectNotFound:
            return False  # deleted by a concurrent writer's sweep
    return False


async def _delete_probes(objects: ObjectStore, own: str, retry_seconds: float) -> None:
    """Delete ``own`` and every other probe object (orphans of crashed opens)."""
    names = await retry_transient(lambda: objects.list(PROBE_PREFIX), PROBE_PREFIX, retry_seconds)
    doomed = sorted({own, *names})
    if len(doomed) > 1:
        log.info("removing probe objects left by an earlier open", count=len(doomed) - 1)
    await retry_transient(lambda: objects.delete(doomed), own, retry_seconds)


class LogWriter:
    """The one writer of a store; see the module docstring."""

    def __init__(
        self,
        objects: ObjectStore,
        loaded_state: State,
        seq: int,
        markers: list[int],
        options: LogOptions,
        epoch: int | None = None,
    ) -> None:
        self.objects = objects
        self.state = loaded_state
        self.options = options
        self.stats = LogStats()
        self.writer_id = os.urandom(16)
        self._seq = seq  # last durable log sequence number
        self._markers = markers
        self._epoch = epoch  # the newest epoch of the markers up to `_seq`
        self._open = _Group()
        self._inflight: _Group | None = None
        self._wakeup = asyncio.Event()
        self._backstop: asyncio.TimerHandle | None = None  # `_flush_by`
        self._failure: StoreError | None = None
        self._closing = False
        self._since_objects = 0
        self._since_bytes = 0
        self._last_ckpt_bytes = 0
        self._ckpt_task: asyncio.Task[None] | None = None
        self._bg: set[asyncio.Task[None]] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._stop_callbacks: list[Callable[[StoreError], object]] = []
        self._validity: Callable[[], str | None] | None = None
        self._claim: ObjectLock | None = None  # the medium's writer lock (`claim_log`)
        #: Waiters for a commit that writes a given key to be durable.
        self.watchers = KeyWatchers()

    # ------------------------------------------------------------- open/close

    @classmethod
    async def open(
        cls,
        objects: ObjectStore,
        options: LogOptions | None = None,
        *,
        epoch: int | None = None,
        takeover: bool = False,
    ) -> LogWriter:
        """Load the store at ``objects`` and become its writer, fencing any other.

        With ``epoch`` (an int >= 0: a partition owner's, from the
        assignment table) the open marker carries it, and the open is
        refused with `StaleEpoch`, writing nothing, if the log's newest
        epoch is higher (see the module docstring). Without, nothing is
        checked and the marker carries none. ``takeover`` is passed to the
        medium's `ObjectStore.claim_log`: on the segment medium it takes the
        log over from a live holder of its lock instead of raising `LogLocked`.
        """
        if epoch is not None and (
            isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0
        ):
            raise ValueError(f"LogWriter epoch must be an int >= 0 or None, got {epoch!r}")
        if Guarantee.ATOMIC_CREATE not in objects.guarantees:
            raise MissingGuarantee(objects.url, Guarantee.ATOMIC_CREATE.value)
        options = options or LogOptions()
        claim = await objects.claim_log(takeover=takeover)
        try:
            self = await cls._open_claimed(objects, options, epoch)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        self._claim = claim
        return self

    @classmethod
    async def _open_claimed(
        cls, objects: ObjectStore, options: LogOptions, epoch: int | None
    ) -> LogWriter:
        await probe_atomic_create(objects, options.write_retry_seconds)
        loaded = await load(objects, options.write_retry_seconds)
        self = cls(objects, loaded.state, loaded.seq, loaded.markers, options, loaded.epoch)
        self._since_objects = loaded.seq - loaded.ckpt_seq
        while True:  # claim the next sequence number with an open marker
            self._check_epoch(epoch)
            seq = self._seq + 1
            data = encode_log(seq, self.writer_id, [], marker=True, epoch=epoch)
            other = await self._create(seq, data)
            if other is None:
                self._markers.append(seq)
                self._seq = seq
                self._epoch = newer_epoch(self._epoch, epoch)
                break
            self.state.apply(other.ops)  # another writer got there first: catch up
            if other.marker:
                self._markers.append(other.seq)
                self._epoch = newer_epoch(self._epoch, other.epoch)
            self._seq = other.seq
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"durable-flush {objects.url}")
        log.debug("writer opened", url=objects.url, seq=self._seq, keys=len(self.state))
        return self

    def _check_epoch(self, epoch: int | None) -> None:
        """`StaleEpoch` if the log up to `_seq` holds a newer epoch than ``epoch``."""
        if epoch is not None and self._epoch is not None and self._epoch > epoch:
            log.info(
                "refused to open at a stale epoch",
                url=self.objects.url,
                epoch=epoch,
                newest=self._epoch,
                seq=self._seq,
            )
            raise StaleEpoch(self.objects.url, epoch, self._epoch, self._seq)

    async def close(self) -> None:
        """Flush every commit, write a final checkpoint, stop. Idempotent."""
        if self._closing:
            if self._flusher is not None:
                await asyncio.gather(self._flusher, return_exceptions=True)
            return
        self._closing = True
        self._wakeup.set()
        if self._backstop is not None:
            self._backstop.cancel()
            self._backstop = None
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._ckpt_task is not None:
            await asyncio.gather(self._ckpt_task, return_exceptions=True)
        if self._failure is None and self.options.checkpoint_on_close and self._since_objects > 0:
            keys, values = self.state.snapshot()
            with contextlib.suppress(ObjectStoreError):
                await self._checkpoint(self._seq, keys, values, list(self._markers))
        if self._bg:
            await asyncio.gather(*self._bg, return_exceptions=True)
        if self._failure is None:
            self._failure = StoreClosed(self.objects.url)
            self._fail_waiters(self._failure)
        if self._claim is not None:
            self._claim.release()

    # ---------------------------------------------------------------- commits

    @property
    def url(self) -> str:
        """The store's location."""
        return self.objects.url

    @property
    def seq(self) -> int:
        """The last durable log sequence number."""
        return self._seq

    @property
    def epoch(self) -> int | None:
        """The newest epoch an open marker of the log carried, this writer's
        included (None: no writer opened at an epoch)."""
        return self._epoch

    @property
    def failure(self) -> StoreError | None:
        """Why this writer stopped, or None while it works."""
        return self._failure

    def add_stop_callback(self, fn: Callable[[StoreError], object]) -> None:
        """Call ``fn(failure)`` once, when the writer stops (fenced, failed or
        closed), after every pending commit and key watcher has failed."""
        self._stop_callbacks.append(fn)

    def set_validity(self, check: Callable[[], str | None] | None) -> None:
        """Make every later `commit` (lazy ones too) call ``check()`` first.

        ``check`` must be cheap and synchronous (it runs once per commit, on
        the hot path). While it returns None the commit proceeds; a reason
        (a str) stops the writer with `SelfFenced` naming it, as `stop`
        does, and the commit raises it with nothing applied. An owner that
        can no longer be sure it still owns the store (its heartbeat is too
        old) so commits nothing more. None removes the check.
        """
        self._validity = check

    def stop(self, error: StoreError) -> None:
        """Stop the writer now with ``error`` (e.g. `SelfFenced`), as fencing does.

        The open group (commits not yet being written) and every key watcher
        and stop callback fail with ``error``; so does every later commit.
        A log write already in flight finishes: its commits resolve with
        what the store answered (it may have landed). A no-op once the
        writer has stopped.
        """
        if self._failure is None:
            self._fail(error, [])

    async def check_fenced(self) -> bool:
        """Whether another writer has opened the store since this one last
        wrote; if so, stop with `Fenced` as a write would have.

        One read of the log object after this writer's last (absent while it
        owns the store; a newer writer's open marker once fenced, and markers
        are never trimmed). Skipped while a flush is in flight: its create
        finds out by itself. A transient error is logged and answers False.
        """
        if self._failure is not None:
            return isinstance(self._failure, Fenced)
        if self._inflight is not None or self._closing:
            return False
        seq = self._seq + 1
        name = log_name(seq)
        try:
            data = await self.objects.get(name)
        except ObjectNotFound:
            return False
        except ObjectStoreError as e:
            log.warning("fence check failed", url=self.objects.url, error=str(e))
            return False
        if self._failure is not None:
            return isinstance(self._failure, Fenced)
        try:
            ours = decode_log(name, data).writer == self.writer_id
        except (CorruptObject, UnsupportedFormat):
            ours = False  # not our bytes: this writer can never write there
        if ours:
            return False  # our own flush landed meanwhile
        if self._inflight is None:  # else that flush finds the name taken itself
            self._fail(Fenced(self.objects.url, seq), [])
        return True

    def check(self) -> None:
        """Raise what a commit made now would raise before applying anything:
        the writer's failure once it has stopped, or `SelfFenced` (stopping
        it) while the validity check (`set_validity`) gives a reason.

        Cheap and in memory: for work that must start only while this
        writer may still commit, such as a step's body, which may start
        long after the commit before it was checked (the process was paused
        while that commit became durable).
        """
        if self._failure is not None:
            raise self._failure
        if self._validity is not None:
            reason = self._validity()
            if reason is not None:
                failure = SelfFenced(self.objects.url, reason, self._seq)
                self.stop(failure)
                raise failure

    def commit(
        self, batch: WriteBatch, *, lazy: bool = False, within: float | None = None
    ) -> Durable:
        """Apply ``batch`` now; the result resolves once it is durable.

        A ``lazy`` commit does not start a flush of its own: it rides the
        next one (an awaited commit's, `flush`, or `close`), for transitions
        that recovery redoes anyway, such as claims. With ``within`` (seconds)
        a lazy commit rides the next flush if one starts within that time,
        else starts one then: a journal entry that the workflow awaits only
        at its next effectful point, so that what follows it (the next entry,
        the run's terminal record) can join its group. Raises the writer's
        failure (`Fenced`, `StoreClosed`) at once if it has stopped; nothing
        is applied then. With a validity check set (`set_validity`), a
        commit made while it gives a reason stops the writer with
        `SelfFenced` and raises it, applying nothing.
        """
        self.check()
        if self._closing:
            raise StoreClosed(self.objects.url, "closing")
        ops = batch.ops
        self.state.apply(ops)
        g = self._open
        g.ops.extend(ops)
        g.released.extend(batch.released)
        g.nbytes += sum(len(x) for x in ops if x is not None) + 8 * len(ops)
        self.stats.commits += 1
        if self.watchers:
            self.watchers.committed(ops, g.durable)
        if not lazy:
            self._wakeup.set()
        elif within is not None:
            self._flush_by(within)
        return g.durable

    def flush_within(self, seconds: float) -> None:
        """Have the commits made so far (lazy ones too) start their flush
        within ``seconds`` at the latest (0: now), without waiting for it:
        they ride any flush that starts sooner."""
        if self._open.ops or self._open.released:
            if seconds <= 0:
                self._wakeup.set()
            else:
                self._flush_by(seconds)

    def _flush_by(self, seconds: float) -> None:
        """Have the open group's flush start within ``seconds`` at the
        latest. One timer serves every group (a group taken before it fires
        needs none; it then re-arms for the open group's due time, if any),
        not one per group: a run going step by step makes a group per step."""
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        g = self._open
        if g.due is None or when < g.due:
            g.due = when
        timer = self._backstop
        if timer is not None and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._backstop = loop.call_at(when, self._backstop_fired)

    def _backstop_fired(self) -> None:
        self._backstop = None
        due = self._open.due
        if due is None:
            return
        loop = asyncio.get_running_loop()
        if due <= loop.time():
            self._wakeup.set()
        else:
            self._backstop = loop.call_at(due, self._backstop_fired)

    async def flush(self) -> None:
        """Wait until every commit made so far is durable."""
        if self._open.ops or self._open.released:
            self._wakeup.set()  # lazy commits may be waiting for a flush
            await self._open.durable
        elif self._inflight is not None:
            await self._inflight.durable
        elif self._failure is not None and not isinstance(self._failure, StoreClosed):
            raise self._failure

    async def checkpoint(self) -> None:
        """Write a checkpoint of everything committed so far, then trim the log."""
        await self.flush()
        await self.wait_idle()
        if self._failure is not None:
            raise self._failure
        keys, values = self.state.snapshot()
        if self._open.ops:  # commits made since the flush: checkpoint after them
            await self.flush()
            keys, values = self.state.snapshot()
        await self._checkpoint(self._seq, keys, values, list(self._markers))

    async def wait_idle(self) -> None:
        """Wait for the checkpoint and blob deletions in progress, if any."""
        if self._ckpt_task is not None:
            await asyncio.gather(self._ckpt_task, return_exceptions=True)
        while self._bg:
            await asyncio.gather(*self._bg, return_exceptions=True)

    # ---------------------------------------------------------------- flusher

    async def _flush_loop(self) -> None:
        while True:
            if not self._closing:
                await self._wakeup.wait()
            self._wakeup.clear()
            if self._failure is not None:
                return  # stopped while idle (`check_fenced`)
            g = self._open
            if not g.ops and not g.released:
                if self._closing:
                    return
                continue
            self._open = _Group()
            self._inflight = g
            seq = self._seq + 1
            snapshot = self._snapshot_if_due(g.nbytes)
            data = encode_log(seq, self.writer_id, g.ops, marker=False)
            try:
                other = await self._create(seq, data)
                if other is not None:
                    raise Fenced(self.objects.url, seq)
            except BaseException as e:
                self._stop(e, g)
                if not isinstance(e, Exception):
                    raise
                return
            self._flushed(g, seq, len(data), snapshot)

    def _flushed(
        self,
        g: _Group,
        seq: int,
        nbytes: int,
        snapshot: tuple[list[bytes], list[bytes]] | None,
    ) -> None:
        """Group ``g`` stands as log object ``seq``: resolve its waiters."""
        self._seq = seq
        self._since_objects += 1
        self._since_bytes += nbytes
        self.stats.log_objects += 1
        self.stats.log_bytes += nbytes
        g.future.set_result(seq)
        self._inflight = None
        if g.released:
            self._spawn(self._delete_quietly(g.released))
        if snapshot is not None:
            self._ckpt_task = asyncio.create_task(
                self._checkpoint(seq, snapshot[0], snapshot[1], list(self._markers))
            )

    def flush_inline(self, durable: Durable, *, was_idle: bool = False) -> bool:
        """Flush ``durable``'s group now, on this thread, with no task switch,
        when: it is the open group, no flush is in flight, no other task is
        ready on the event loop (`loop_idle`: none could join the group
        before the flusher ran), and the store makes the create at once
        (`ObjectStore.create_now`: a quick local append). For a waiter with
        nothing else to do, such as a run going step by step. True once the
        group is durable; False, nothing changed, when any of that does not
        hold or the attempt failed (the flusher then makes it, with its
        retries and its reports).

        ``was_idle``: the caller found the loop idle before it made its
        commit, with no await since; what its commit itself made ready
        (the tasks it woke) has not run, so cannot have joined the group."""
        g = self._open
        if (
            g.durable is not durable
            or self._inflight is not None
            or self._failure is not None
            or self._closing
            or not g.ops
            or not (was_idle or loop_idle())
        ):
            return False
        seq = self._seq + 1
        snapshot = self._snapshot_if_due(g.nbytes)
        data = encode_log(seq, self.writer_id, g.ops, marker=False)
        try:
            if not self.objects.create_now(log_name(seq), data):
                return False
        except Exception:  # the flusher tries again and reports
            return False
        self._open = _Group()
        self._flushed(g, seq, len(data), snapshot)
        return True

    def _stop(self, e: BaseException, g: _Group) -> None:
        if isinstance(e, Fenced | StoreClosed):
            failure: StoreError = e
        else:
            failure = StoreClosed(self.objects.url, f"a log write failed: {e!r}")
            failure.__cause__ = e
        self._fail(failure, [g], quiet=isinstance(e, asyncio.CancelledError))

    def _fail(self, failure: StoreError, groups: list[_Group], *, quiet: bool = False) -> None:
        """Stop: fail ``groups``, the open group and every waiter with ``failure``.

        Once stopped (`stop`, then an in-flight write failed), only the
        groups are failed: the first failure stays the writer's.
        """
        if self._failure is not None:
            for grp in (*groups, self._open):
                _fail_group(grp.future, failure)
            return
        self._failure = failure
        if quiet:  # the loop is shutting down
            log.debug("writer stopped", url=self.objects.url, error=str(failure))
        else:
            log.error("writer stopped", url=self.objects.url, error=str(failure))
        if isinstance(failure, Fenced):  # SelfFenced too: this writer may not write on
            events.emit("fence", url=self.objects.url, error=str(failure))
        for grp in (*groups, self._open):
            _fail_group(grp.future, failure)
        self._wakeup.set()  # an idle flusher exits
        self._fail_waiters(failure)

    def _fail_waiters(self, failure: StoreError) -> None:
        self.watchers.stop(failure)
        callbacks, self._stop_callbacks = self._stop_callbacks, []
        for fn in callbacks:
            fn(failure)

    async def _create(self, seq: int, data: bytes) -> LogObject | None:
        """Create log object ``seq``; None once ours stands there, else theirs."""
        name = log_name(seq)
        try:
            existing = await create_retrying(
                self.objects, name, data, self.options.write_retry_seconds, self._retried
            )
        except ObjectNotFound:
            raise Fenced(self.objects.url, seq) from None  # trimmed: a newer writer
        return None if existing is None else decode_log(name, existing)

    def _retried(self, _error: ObjectStoreError) -> None:
        self.stats.write_retries += 1

    # ------------------------------------------------------------ checkpoints

    def _snapshot_if_due(self, nbytes: int) -> tuple[list[bytes], list[bytes]] | None:
        if self._ckpt_task is not None and not self._ckpt_task.done():
            return None
        o = self.options
        since_objects = self._since_objects + 1
        since_bytes = self._since_bytes + nbytes
        if since_objects < o.checkpoint_max_objects and since_bytes < max(
            o.checkpoint_min_bytes, self._last_ckpt_bytes
        ):
            return None
        # The map now holds exactly the state after this group: snapshot it.
        return self.state.snapshot()

    async def _checkpoint(
        self, seq: int, keys: list[bytes], values: list[bytes], markers: list[int]
    ) -> None:
        try:
            data = await asyncio.to_thread(
                encode_checkpoint, seq, self.writer_id, keys, values, markers, self._epoch
            )
            await self.objects.put(ckpt_name(seq), data)
        except ObjectStoreError as e:
            log.warning("checkpoint failed", url=self.objects.url, seq=seq, error=str(e))
            return
        self.stats.checkpoints += 1
        self._last_ckpt_bytes = len(data)
        self._since_objects = self._seq - seq
        self._since_bytes = 0
        keep = set(markers)
        try:
            window = self.options.write_retry_seconds
            ckpts = await list_seqs(self.objects, CKPT_PREFIX, window)
            old = [ckpt_name(s) for s in ckpts if s < seq]
            logs = await list_seqs(self.objects, LOG_PREFIX, window)
            old += [log_name(s) for s in logs if s <= seq and s not in keep]
            await self.objects.delete(old)
        except ObjectStoreError as e:
            log.warning("log trim failed", url=self.objects.url, seq=seq, error=str(e))

    # ------------------------------------------------------------- background

    def _spawn(self, coro: Any) -> None:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    async def _delete_quietly(self, names: list[str]) -> None:
        try:
            await self.objects.delete(names)
        except ObjectStoreError as e:  # an orphan, never a dangling reference
            log.warning("blob delete failed", names=names[:3], error=str(e))
