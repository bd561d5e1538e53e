"""Reading a bulk run's inputs: `read_jsonl`.

`read_jsonl` yields one input per JSON line of a local file. Blank lines are
skipped; a line that is not valid JSON (or not UTF-8) yields an
`InvalidItem` naming the line, so one bad line becomes one failed item of
the batch instead of stopping it. The file is read in blocks off the event
loop, so a large file is never held in memory whole.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import IO, Any

from durable.engine.bulk.codec import InvalidItem

__all__ = ["read_jsonl"]

#: Bytes of lines read from the file at a time.
_BLOCK = 1 << 16


def _parse(raw: bytes, line: int) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        return InvalidItem(f"line {line}: invalid JSON: {e.msg} (column {e.colno})", line)
    except ValueError as e:  # UnicodeDecodeError: not UTF-8
        return InvalidItem(f"line {line}: not UTF-8 text: {e}", line)


async def read_jsonl(path: str | os.PathLike[str]) -> AsyncIterator[Any]:
    """The JSON value of each non-blank line of the file at ``path``, in order;
    an `InvalidItem` for a line that does not parse. `OSError` if the file
    cannot be read."""
    f: IO[bytes] = await asyncio.to_thread(open, os.fspath(path), "rb")
    try:
        line = 0
        while lines := await asyncio.to_thread(f.readlines, _BLOCK):
            for raw in lines:
                line += 1
                if raw.strip():
                    yield _parse(raw, line)
    finally:
        f.close()
