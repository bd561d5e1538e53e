"""Write the golden files of format version 1 (run once per released format).

    python tests/golden/make_golden.py

Never regenerate an existing version's files: they pin what older releases
wrote, and the tests check that this code still reads them.
"""

from __future__ import annotations

from pathlib import Path

from durable.store.framing import Kind, frame
from durable.store.log.format import encode_checkpoint, encode_log
from durable.store.queue.records import (
    AttemptOutcome,
    HistoryEntry,
    JobRecord,
    JobStatus,
    encode_history_entry,
    encode_record,
)

HERE = Path(__file__).parent / "v1"
WRITER = bytes(range(16))

LOG_OPS = [b"a", b"1", b"b", None, b"\xff\x00bin", b"\x00\x01"]
CKPT = ([b"a", b"c"], [b"1", b"3"], [1, 7])
RECORD = JobRecord(
    id="01HZX3B2W3R8R8R8R8R8R8R8R8",
    queue="emails",
    payload=b"hello",
    status=JobStatus.SCHEDULED,
    attempts=2,
    max_attempts=5,
    enqueued_at=1_700_000_000_000,
    priority=1000,
    headers={"k": "v"},
    claimed_at=None,
    run_at=1_700_000_060_000,
    last_error="boom",
    dedup_key=None,
    cancel_requested=True,
)
HISTORY = HistoryEntry(
    attempt=2,
    claimed_at=1_700_000_001_000,
    recorded_at=1_700_000_002_000,
    outcome=AttemptOutcome.RETRIED,
    error="boom",
)


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    (HERE / "log.bin").write_bytes(encode_log(42, WRITER, LOG_OPS, marker=False))
    (HERE / "marker.bin").write_bytes(encode_log(43, WRITER, [], marker=True))
    (HERE / "checkpoint.bin").write_bytes(encode_checkpoint(42, WRITER, *CKPT))
    (HERE / "blob.bin").write_bytes(frame(Kind.BLOB, b"payload bytes"))
    (HERE / "record.bin").write_bytes(encode_record(RECORD))
    (HERE / "history.bin").write_bytes(encode_history_entry(HISTORY))


if __name__ == "__main__":
    main()
