"""Memo entries of format version 1 stay readable, and are still written the same way."""

from __future__ import annotations

from pathlib import Path

from make_golden_memo import MEMO_KEY, MEMO_VALUE

from durable.engine.memo_codec import decode_entry, encode_entry

GOLDEN = Path(__file__).parent / "v1" / "memo_entry.bin"


def test_v1_memo_entry_reads_back() -> None:
    assert decode_entry("memo/x", GOLDEN.read_bytes(), MEMO_KEY) == MEMO_VALUE


def test_the_current_writer_still_writes_v1_memo_entries() -> None:
    assert encode_entry(MEMO_KEY, MEMO_VALUE)[0] == GOLDEN.read_bytes()
