"""The store directory an example runs on: the first argument, or a temporary one."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


def run_with_store(main: Callable[[Path], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(store_dir)``: ``store_dir`` is ``ARGV[1]/store``, or one in a
    temporary directory that is removed afterwards."""
    given = len(sys.argv) > 1
    base = Path(sys.argv[1]) if given else Path(tempfile.mkdtemp(prefix="durable-"))
    try:
        asyncio.run(main(base / "store"))
    finally:
        if not given:
            shutil.rmtree(base, ignore_errors=True)
