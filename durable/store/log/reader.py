"""A read-only view of a store that never fences its writer.

`LogReader` loads the same checkpoint and log as the writer and can
`refresh` by reading the log objects written since. When a newer checkpoint
covers more than the reader can read in sequence (the log it needs was
trimmed, even if open markers, which are never trimmed, make what is left
look consecutive), it loads that checkpoint instead.
"""

from __future__ import annotations

from durable.errors import ObjectNotFound, StoreNotInitialized
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX
from durable.store.log.loader import consecutive_after, fetch_logs, list_seqs, load
from durable.store.log.retry import DEFAULT_RETRY_SECONDS
from durable.store.log.state import State
from durable.store.objects.base import ObjectStore

__all__ = ["LogReader"]


class LogReader:
    """Read-only state of a store, refreshed on demand.

    Every read retries transient errors for ``retry_seconds``.
    """

    def __init__(
        self,
        objects: ObjectStore,
        state: State,
        seq: int,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self.objects = objects
        self.state = state
        self.seq = seq
        self.retry_seconds = retry_seconds

    @classmethod
    async def open(
        cls, objects: ObjectStore, retry_seconds: float = DEFAULT_RETRY_SECONDS
    ) -> LogReader:
        """Load the store; `StoreNotInitialized` if it holds no objects yet."""
        loaded = await load(objects, retry_seconds)
        if loaded.empty:
            raise StoreNotInitialized(objects.url)
        return cls(objects, loaded.state, loaded.seq, retry_seconds)

    @property
    def url(self) -> str:
        """The store's location."""
        return self.objects.url

    async def refresh(self) -> int:
        """Apply every log object written since the last refresh; return the new seq."""
        window = self.retry_seconds
        ckpts = await list_seqs(self.objects, CKPT_PREFIX, window)
        seqs = await list_seqs(self.objects, LOG_PREFIX, window)
        run, gap = consecutive_after(seqs, self.seq)
        # A writer that restarted, checkpointed and trimmed leaves its open
        # markers behind: they can continue our seq without a gap while the
        # commits after them are only in the checkpoint.
        trimmed = bool(ckpts) and ckpts[-1] > (run[-1] if run else self.seq)
        if gap is None and not trimmed:
            try:
                for obj in await fetch_logs(self.objects, run, window):
                    self.state.apply(obj.ops)
                    self.seq = obj.seq
                return self.seq
            except ObjectNotFound:
                pass  # trimmed under us
        loaded = await load(self.objects, window)  # the log we need was trimmed: reload
        self.state, self.seq = loaded.state, loaded.seq
        return self.seq
