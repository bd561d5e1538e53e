"""The engine's stored records stay readable: golden files of every format version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from make_golden_engine import (
    FILES,
    RUN_OUTCOME,
    RUN_RECORD,
    RUN_RESULT,
    STEP_POINTER,
    TERMINAL_RECORD,
)

from durable.engine import (
    decode_run_outcome,
    decode_run_record,
    decode_run_result,
    decode_step_pointer,
    decode_terminal_record,
)

V1 = Path(__file__).parent / "v1"


def golden(name: str) -> bytes:
    return (V1 / name).read_bytes()


@pytest.mark.parametrize(
    ("name", "decode", "expected"),
    [
        ("engine_run_record.bin", decode_run_record, RUN_RECORD),
        ("engine_step_pointer.bin", decode_step_pointer, STEP_POINTER),
        ("engine_terminal_record.bin", decode_terminal_record, TERMINAL_RECORD),
        ("engine_run_outcome.bin", decode_run_outcome, RUN_OUTCOME),
        ("engine_run_result.bin", decode_run_result, RUN_RESULT),
    ],
)
def test_v1_engine_records_read_back(
    name: str, decode: Callable[[bytes], object], expected: object
) -> None:
    assert decode(golden(name)) == expected


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_current_writer_still_writes_v1(name: str) -> None:
    # When this fails on purpose (a new format version), add a v2 folder and
    # keep v1: old stores must stay readable.
    _, encode = FILES[name]
    assert encode() == golden(name)
