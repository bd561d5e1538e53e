"""Stored formats stay readable: golden files of every released format version."""

from __future__ import annotations

from pathlib import Path

import pytest
from make_golden import CKPT, HISTORY, LOG_OPS, RECORD, WRITER

from durable.store.framing import Kind, unframe
from durable.store.log.format import (
    decode_checkpoint,
    decode_log,
    encode_checkpoint,
    encode_log,
)
from durable.store.queue.records import (
    decode_history,
    decode_record,
    encode_history_entry,
    encode_record,
)

V1 = Path(__file__).parent / "v1"


def golden(name: str) -> bytes:
    return (V1 / name).read_bytes()


def test_v1_log_object_reads_back() -> None:
    log = decode_log("log/00000000000000000042", golden("log.bin"))
    assert (log.seq, log.writer, log.ops, log.marker) == (42, WRITER, LOG_OPS, False)
    marker = decode_log("log/00000000000000000043", golden("marker.bin"))
    assert marker.marker
    assert marker.ops == []
    assert marker.epoch is None  # written before epochs: no epoch


def test_v1_checkpoint_reads_back() -> None:
    ck = decode_checkpoint("ckpt/00000000000000000042", golden("checkpoint.bin"))
    assert (ck.keys, ck.values, ck.markers) == CKPT
    assert ck.seq == 42
    assert ck.epoch is None


def test_v1_blob_frame_reads_back() -> None:
    assert unframe("blobs/x", golden("blob.bin"), Kind.BLOB) == (1, b"payload bytes")


def test_v1_job_record_and_history_read_back() -> None:
    assert decode_record(golden("record.bin")) == RECORD
    assert decode_history(golden("history.bin")) == [HISTORY]


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("log.bin", lambda: encode_log(42, WRITER, LOG_OPS, marker=False)),
        ("marker.bin", lambda: encode_log(43, WRITER, [], marker=True)),  # no epoch: unchanged
        ("checkpoint.bin", lambda: encode_checkpoint(42, WRITER, *CKPT)),
        ("record.bin", lambda: encode_record(RECORD)),
        ("history.bin", lambda: encode_history_entry(HISTORY)),
    ],
)
def test_the_current_writer_still_writes_v1(name: str, encoded: object) -> None:
    # When this fails on purpose (a new format version), add a v2 folder and
    # keep v1: old stores must stay readable.
    assert callable(encoded)
    assert encoded() == golden(name)
