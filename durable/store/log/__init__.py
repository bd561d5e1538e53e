"""The transactional log: an ordered map in memory, durable on an object store."""

from durable.store.log.batch import WriteBatch
from durable.store.log.blobs import BlobStore
from durable.store.log.follow import Follower
from durable.store.log.reader import LogReader
from durable.store.log.state import State, prefix_end
from durable.store.log.watch import KeyWatchers
from durable.store.log.writer import Durable, LogOptions, LogStats, LogWriter

__all__ = [
    "BlobStore",
    "Durable",
    "Follower",
    "KeyWatchers",
    "LogOptions",
    "LogReader",
    "LogStats",
    "LogWriter",
    "State",
    "WriteBatch",
    "prefix_end",
]
