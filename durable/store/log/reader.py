"""A read-only view of a store that never fences its writer.

`LogReader` loads the same checkpoint and log as the writer and catches up
with the log objects written since, two ways:

- `refresh` sees every commit durable before it began: it tails the log
  with GETs (below), then LISTs ``ckpt/`` once to learn whether a
  checkpoint trimmed log objects it had not read.
- `poll` is the cheap tail for a loop (`durable.store.log.follow.Follower`):
  the same GETs, and a LIST of ``ckpt/`` only when the GETs cannot tell
  whether the log went on without the reader: after `LogReader.list_every`
  polls in a row that found nothing new, on a gap (an absent name with a
  later one present: a trim raced the GETs), or after an open marker (a
  writer reopened the store: it may have checkpointed at close and trimmed
  its log, leaving only its open markers, which are never trimmed and
  continue the reader's sequence without a gap). A commit whose log object
  a checkpoint trimmed before the reader got to it is thus seen within
  ``list_every`` polls.

The GETs read ``log/<seq + 1>``, then the names after it in a window that
doubles while objects keep turning up (up to 32 at once), until the first
absent name: one GET while the writer is idle, and no LIST.

When the LIST shows a checkpoint newer than the reader's sequence, the
reader lists the log too and reads what follows in sequence, or, when the
newest checkpoint covers more than it can read in sequence, loads that
checkpoint instead.

`LogReader.watchers` (`KeyWatchers`) fire for the keys of every log object
the reader applies, and for every watched key whose value a checkpoint
reload changed. `LogReader.close` fails them with `StoreClosed`.
"""

from __future__ import annotations

import asyncio

from durable.errors import ObjectNotFound, StoreClosed, StoreNotInitialized
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX, LogObject, decode_log, log_name
from durable.store.log.loader import (
    Loaded,
    consecutive_after,
    fetch_logs,
    get_object,
    list_seqs,
    load,
)
from durable.store.log.retry import DEFAULT_RETRY_SECONDS
from durable.store.log.state import State
from durable.store.log.watch import KeyWatchers
from durable.store.objects.base import ObjectStore

__all__ = ["DEFAULT_LIST_EVERY", "LogReader"]

#: Polls in a row that find nothing new before one LIST of ``ckpt/`` (`LogReader.poll`).
DEFAULT_LIST_EVERY = 10
_MAX_WINDOW = 32


class LogReader:
    """Read-only state of a store, refreshed on demand; see the module docstring.

    Every read retries transient errors for ``retry_seconds``. Refreshes
    and polls run one at a time (a second waits for the first).
    """

    def __init__(
        self,
        objects: ObjectStore,
        state: State,
        seq: int,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        *,
        list_every: int = DEFAULT_LIST_EVERY,
    ) -> None:
        if isinstance(list_every, bool) or not isinstance(list_every, int) or list_every < 1:
            raise ValueError(f"list_every must be an int >= 1, got {list_every!r}")
        self.objects = objects
        self.state = state
        self.seq = seq
        self.retry_seconds = retry_seconds
        #: Polls in a row that find nothing new before a LIST of ``ckpt/``.
        self.list_every = list_every
        #: Watchers of keys, fired by the refresh that applies a write of them.
        self.watchers = KeyWatchers()
        self._empty_polls = 0
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(
        cls,
        objects: ObjectStore,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        *,
        list_every: int = DEFAULT_LIST_EVERY,
    ) -> LogReader:
        """Load the store; `StoreNotInitialized` if it holds no objects yet."""
        loaded = await load(objects, retry_seconds)
        if loaded.empty:
            raise StoreNotInitialized(objects.url)
        return cls(objects, loaded.state, loaded.seq, retry_seconds, list_every=list_every)

    @property
    def url(self) -> str:
        """The store's location."""
        return self.objects.url

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def close(self) -> None:
        """Fail every key watcher, and every later watch, with `StoreClosed`;
        later refreshes raise it. The state stays readable. Idempotent."""
        if not self._closed:
            self._closed = True
            self.watchers.stop(StoreClosed(self.url))

    async def refresh(self) -> int:
        """Apply every commit durable before this call; return the new seq.

        The GET tail, then one LIST of ``ckpt/``. `StoreClosed` once the
        reader is closed.
        """
        return await self._catch_up(always_list=True)

    async def poll(self) -> int:
        """Apply the log objects the GET tail finds; return the new seq.

        Cheaper than `refresh`: a LIST only after `list_every` empty polls,
        a gap or an open marker (see the module docstring). `StoreClosed`
        once the reader is closed.
        """
        return await self._catch_up(always_list=False)

    async def _catch_up(self, *, always_list: bool) -> int:
        async with self._lock:
            if self._closed:
                raise StoreClosed(self.url)
            applied, suspect = await self._tail()
            self._empty_polls = 0 if applied else self._empty_polls + 1
            if always_list or suspect or self._empty_polls >= self.list_every:
                self._empty_polls = 0
                await self._check_checkpoint()
            return self.seq

    # ------------------------------------------------------------- the tail

    async def _tail(self) -> tuple[int, bool]:
        """GET the log objects after ``seq`` until one is absent.

        Returns how many were applied, and whether a LIST must check for a
        trim (a gap, or an open marker was seen).
        """
        applied, suspect, window = 0, False, 1
        while True:
            start = self.seq + 1
            found = await asyncio.gather(*(self._get_log(s) for s in range(start, start + window)))
            for i, obj in enumerate(found):
                if obj is None:
                    gap = any(later is not None for later in found[i + 1 :])
                    return applied, suspect or gap
                self._apply(obj)
                applied += 1
                suspect = suspect or obj.marker
            window = min(window * 2, _MAX_WINDOW)

    async def _get_log(self, seq: int) -> LogObject | None:
        name = log_name(seq)
        try:
            data = await get_object(self.objects, name, self.retry_seconds)
        except ObjectNotFound:
            return None
        return decode_log(name, data)

    def _apply(self, obj: LogObject) -> None:
        self.state.apply(obj.ops)
        self.seq = obj.seq
        self.watchers.applied(obj.ops)

    # ------------------------------------------------------- the LIST path

    async def _check_checkpoint(self) -> None:
        """Catch up by listing when a checkpoint newer than ``seq`` exists."""
        window = self.retry_seconds
        ckpts = await list_seqs(self.objects, CKPT_PREFIX, window)
        if not ckpts or ckpts[-1] <= self.seq:
            return  # the log after seq is untrimmed: the GETs saw all of it
        seqs = await list_seqs(self.objects, LOG_PREFIX, window)
        run, gap = consecutive_after(seqs, self.seq)
        # A writer that restarted, checkpointed and trimmed leaves its open
        # markers behind: they can continue our seq without a gap while the
        # commits after them are only in the checkpoint.
        trimmed = ckpts[-1] > (run[-1] if run else self.seq)
        if gap is None and not trimmed:
            try:
                for obj in await fetch_logs(self.objects, run, window):
                    self._apply(obj)
                return
            except ObjectNotFound:
                pass  # trimmed under us
        self._reload(await load(self.objects, window))  # the log we need was trimmed

    def _reload(self, loaded: Loaded) -> None:
        # Every watcher fires: the trimmed log may have written a watched key
        # and restored it (a run's step pointer put, then deleted when the
        # run ended), which comparing the two states cannot see.
        self.state, self.seq = loaded.state, loaded.seq
        self.watchers.written(list(self.watchers.watched()))
