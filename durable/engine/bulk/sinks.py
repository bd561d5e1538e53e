"""Where a bulk run writes its items' output records: a `Sink`.

For every item that terminates, the run writes one `OutputRecord` (run id,
key, status, and the output of a succeeded item or the error of a failed or
cancelled one) with `Sink.write`, and calls `Sink.flush` when it stops.
Records are written at least once per bulk run: the run ignores a run id it
has already written, but a crash between a record's write and the flush can
repeat it when the batch is run again, so a consumer of a sink's output
keys on ``run_id``.

`NullSink` discards the records (the default); `JsonlSink` writes one JSON
object per line to a local file.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from durable.engine._checks import check_int

__all__ = ["JsonlSink", "NullSink", "OutputRecord", "Sink", "to_json_value"]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One terminated item: ``status`` is ``"succeeded"``, ``"failed"`` or
    ``"cancelled"``; ``output`` is a succeeded item's decoded output,
    ``error`` why an item failed or was cancelled (or, for a succeeded item,
    why its output is not available)."""

    run_id: str
    key: str
    status: str
    output: Any = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object: ``output`` only for a succeeded item,
        ``error`` only when set; bytes as base64 text (`to_json_value`)."""
        obj: dict[str, Any] = {"run_id": self.run_id, "key": self.key, "status": self.status}
        if self.status == "succeeded":
            obj["output"] = to_json_value(self.output)
        if self.error is not None:
            obj["error"] = self.error
        return obj


def to_json_value(value: Any) -> Any:
    """``value`` (decoded MessagePack) as JSON-ready data: bytes (also as map
    keys) become base64 text, tuples lists; anything else JSON cannot hold
    becomes its ``repr``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {_json_key(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def _json_key(key: Any) -> Any:
    if key is None or isinstance(key, str | int | float | bool):
        return key  # json writes these as strings
    return to_json_value(key) if isinstance(key, bytes) else repr(key)


@runtime_checkable
class Sink(Protocol):
    """Receives the output records of a bulk run."""

    async def write(self, record: OutputRecord) -> None:
        """Take one record (it may be buffered until `flush`)."""
        ...

    async def flush(self) -> None:
        """Make every record written so far durable."""
        ...


class NullSink:
    """A sink that discards every record."""

    async def write(self, record: OutputRecord) -> None:
        """Discard ``record``."""

    async def flush(self) -> None:
        """Nothing to do."""


def _append(path: str, mode: str, lines: list[str]) -> None:
    with open(path, mode, encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())


class JsonlSink:
    """One JSON object (`OutputRecord.to_json`) per line of the file at ``path``.

    The first flush truncates the file (a new bulk run writes a new file)
    unless ``append``; later ones append. Records are buffered and written,
    then fsynced, every ``buffer_records`` records and at each `flush`; the
    file is opened only for that, off the event loop.
    """

    __slots__ = ("_buffer", "_lock", "_path", "_started", "buffer_records")

    def __init__(
        self, path: str | os.PathLike[str], *, append: bool = False, buffer_records: int = 256
    ) -> None:
        self._path = os.fspath(path)
        self._started = append
        self._buffer: list[str] = []
        self._lock = asyncio.Lock()
        #: Records buffered before a write to the file.
        self.buffer_records = check_int("JsonlSink.buffer_records", buffer_records, 1, 2**31)

    def __repr__(self) -> str:
        return f"JsonlSink({self._path!r})"

    @property
    def path(self) -> str:
        """The file written."""
        return self._path

    async def write(self, record: OutputRecord) -> None:
        """Buffer ``record`` as a line; write the buffer when it is full."""
        self._buffer.append(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
        if len(self._buffer) >= self.buffer_records:
            await self.flush()

    async def flush(self) -> None:
        """Write and fsync the buffered lines (the first flush truncates the
        file unless ``append``)."""
        async with self._lock:
            lines, self._buffer = self._buffer, []
            mode = "a" if self._started else "w"
            try:
                await asyncio.to_thread(_append, self._path, mode, lines)
            except BaseException:
                self._buffer = lines + self._buffer  # kept for the next flush
                raise
            self._started = True
