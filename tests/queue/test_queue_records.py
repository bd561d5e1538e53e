"""Pure parts: key layout and order, record encoding, options, backoff (no store)."""

from __future__ import annotations

import datetime as dt

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable.errors import CorruptRecord, InvalidId, InvalidOption, InvalidQueueName
from durable.store.queue import (
    DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD,
    LEASE_MARGIN,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    AttemptOutcome,
    EnqueueOptions,
    HistoryEntry,
    JobRecord,
    JobStatus,
    OpenOptions,
    QueueConfig,
    keys,
)
from durable.store.queue.options import backoff_ms, validate_queue_name
from durable.store.queue.records import (
    decode_history,
    decode_record,
    encode_history_entry,
    encode_record,
)


def record(**kw: object) -> JobRecord:
    base: dict[str, object] = dict(
        id="01J0000000000000000000000A",
        queue="q",
        payload=b"p",
        status=JobStatus.PENDING,
        attempts=0,
        max_attempts=3,
        enqueued_at=1,
        priority=PRIORITY_NORMAL,
    )
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------- keys


def test_pending_keys_sort_by_priority_then_id() -> None:
    ks = [
        keys.pending_key("q", PRIORITY_LOW, "A"),
        keys.pending_key("q", PRIORITY_HIGH, "Z"),
        keys.pending_key("q", PRIORITY_NORMAL, "B"),
        keys.pending_key("q", PRIORITY_NORMAL, "A"),
        keys.pending_key("q", 0, "Z"),
        keys.pending_key("q", 2**32 - 1, "0"),
    ]
    order = [keys.parse_primary(k) for k in sorted(ks)]
    assert [(p.priority, p.id) for p in order if p] == [
        (0, "Z"),
        (PRIORITY_HIGH, "Z"),
        (PRIORITY_NORMAL, "A"),
        (PRIORITY_NORMAL, "B"),
        (PRIORITY_LOW, "A"),
        (2**32 - 1, "0"),
    ]


def test_queue_names_never_prefix_each_other() -> None:
    # "a" and "ab" share a byte prefix, but the length byte separates them.
    assert not keys.pending_prefix("ab").startswith(keys.pending_prefix("a"))
    assert not keys.pending_key("a", 1, "x").startswith(keys.pending_prefix("ab"))
    assert not keys.dead_key("a", "bx").startswith(keys.dead_prefix("ab"))


def test_time_led_keys_sort_by_time_across_queues() -> None:
    ks = [keys.scheduled_key(20, "a", "1"), keys.scheduled_key(10, "zz", "2")]
    assert [keys.parse_primary(k).at for k in sorted(ks)] == [10, 20]  # type: ignore[union-attr]
    assert keys.done_key(2**64 - 1, "q", "x") > keys.done_key(2**63, "q", "x")


@given(
    status=st.sampled_from(list(JobStatus)),
    queue=st.text(max_size=20),
    id=st.from_regex(r"[A-Za-z0-9_-]{1,30}", fullmatch=True),
    priority=st.integers(0, 2**32 - 1),
    at=st.integers(0, 2**64 - 1),
)
def test_primary_keys_round_trip(
    status: JobStatus, queue: str, id: str, priority: int, at: int
) -> None:
    k = keys.primary_key(status, queue, id, priority=priority, at=at)
    p = keys.parse_primary(k)
    assert p is not None
    assert (p.status, p.queue, p.id) == (status, queue, id)
    if status is JobStatus.PENDING:
        assert p.priority == priority
    if status in (JobStatus.SCHEDULED, JobStatus.DONE):
        assert p.at == at


def test_parse_rejects_foreign_keys() -> None:
    assert keys.parse_primary(b"\xffuser") is None
    assert keys.parse_primary(keys.job_index_key("x")) is None
    assert keys.parse_primary(b"\x01\x02\x01q") is None  # wrong layout version
    assert keys.parse_stats_key(keys.stats_key("q", "pending")) == ("q", "pending")
    assert keys.parse_stats_key(b"\x01") is None


# ------------------------------------------------------------- records


def test_record_round_trips_every_field() -> None:
    rec = record(
        payload=b"\x00\xff",
        payload_ref="blobs/x",
        headers={"workflow.run": "r1"},
        status=JobStatus.DEAD,
        attempts=4,
        claimed_at=5,
        run_at=6,
        woken_at=7,
        wake_payload=b"w",
        last_error="boom",
        dedup_key="d",
        completed_at=8,
        failed_at=9,
        cancel_requested=True,
    )
    assert decode_record(encode_record(rec)) == rec


def test_record_encoding_is_named_with_version_and_bin_bytes() -> None:
    m = msgpack.unpackb(encode_record(record()), raw=False)
    assert m["v"] == 1
    assert m["status"] == "Pending"
    assert isinstance(m["payload"], bytes)
    # empty optionals, empty headers and a false cancel flag are omitted
    for absent in ("payload_ref", "headers", "claimed_at", "cancel_requested", "dedup_key"):
        assert absent not in m


def test_record_decoding_ignores_unknown_and_defaults_missing() -> None:
    data = msgpack.packb(
        {
            "v": 9,
            "id": "a",
            "queue": "q",
            "status": "Scheduled",
            "max_attempts": 2,
            "enqueued_at": 3,
            "priority": 4,
            "attempts": 1,
            "future_field": [1, 2],
        },
        use_bin_type=True,
    )
    rec = decode_record(data)
    assert rec.status is JobStatus.SCHEDULED
    assert rec.payload == b""
    assert rec.headers == {}
    assert rec.cancel_requested is False
    assert rec.run_at is None


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({"id": "a"}),
        msgpack.packb({"id": "a", "queue": "q", "status": "Bogus"}),
        msgpack.packb({"id": 1, "queue": "q", "status": "Pending"}),
    ],
)
def test_undecodable_records_raise_corrupt_record(data: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_record(data, "k")


def test_history_entries_concatenate_in_write_order() -> None:
    entries = [
        HistoryEntry(1, 10, AttemptOutcome.RETRIED, claimed_at=5, error="e1"),
        HistoryEntry(2, 20, AttemptOutcome.LEASE_EXPIRED, claimed_at=15),
        HistoryEntry(0, 30, AttemptOutcome.REQUEUED),
    ]
    data = b"".join(encode_history_entry(e) for e in entries)
    assert decode_history(data) == entries
    with pytest.raises(CorruptRecord):
        decode_history(msgpack.packb({"attempt": 1}))


def test_exhausted_treats_zero_max_attempts_as_one() -> None:
    assert record(attempts=1, max_attempts=0).exhausted
    assert record(attempts=1, max_attempts=1).exhausted
    assert not record(attempts=1, max_attempts=2).exhausted


# ------------------------------------------------------------- options


def test_defaults_of_1_26() -> None:
    c = QueueConfig()
    assert (c.max_attempts, c.lease_duration, c.default_priority) == (3, 30.0, 1000)
    assert (c.retry_backoff_base, c.retry_backoff_max) == (1.0, 300.0)
    assert c.keep_done_jobs is None
    assert c.dead_retention == 7 * 24 * 3600
    o = OpenOptions()
    assert (o.reaper_interval, o.scheduler_interval) == (5.0, 1.0)
    assert o.default_queue_config == QueueConfig()
    assert dict(o.queue_configs) == {}
    assert o.payload_offload_threshold == DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD == 256 * 1024
    assert o.liveness_heartbeat is None
    assert (PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW) == (100, 1000, 10_000)
    assert LEASE_MARGIN == 5.0
    e = EnqueueOptions()
    assert all(getattr(e, f) is None for f in e.__dataclass_fields__)


def test_config_for_uses_per_queue_then_default() -> None:
    special = QueueConfig(max_attempts=9)
    o = OpenOptions(queue_configs={"special": special})
    assert o.config_for("special") is special
    assert o.config_for("other") == QueueConfig()


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: QueueConfig(max_attempts=-1), "max_attempts"),
        (lambda: QueueConfig(max_attempts=2**32), "max_attempts"),
        (lambda: QueueConfig(lease_duration=-1), "lease_duration"),
        (lambda: QueueConfig(lease_duration=float("nan")), "lease_duration"),
        (lambda: QueueConfig(default_priority=2**32), "default_priority"),
        (lambda: QueueConfig(retry_backoff_base=-0.5), "retry_backoff_base"),
        (lambda: QueueConfig(keep_done_jobs=-1), "keep_done_jobs"),
        (lambda: QueueConfig(dead_retention=float("inf")), "dead_retention"),
        (lambda: OpenOptions(reaper_interval=0), "reaper_interval"),
        (lambda: OpenOptions(scheduler_interval=-1), "scheduler_interval"),
        (lambda: OpenOptions(payload_offload_threshold=-1), "payload_offload_threshold"),
        (lambda: OpenOptions(liveness_heartbeat=0), "liveness_heartbeat"),
        (lambda: OpenOptions(clock="now"), "clock"),  # type: ignore[arg-type]
        (lambda: EnqueueOptions(max_attempts=True), "max_attempts"),  # bool is not an int here
        (lambda: EnqueueOptions(priority=-1), "priority"),
        (lambda: EnqueueOptions(run_at=1.5), "run_at"),  # type: ignore[arg-type]
        (lambda: EnqueueOptions(run_at=dt.datetime(2030, 1, 1)), "timezone-aware"),
        (lambda: EnqueueOptions(dedup_key=5), "dedup_key"),  # type: ignore[arg-type]
        (lambda: EnqueueOptions(headers={"a": 1}), "headers"),  # type: ignore[dict-item]
    ],
)
def test_bad_options_raise_invalid_option_naming_the_field(make: object, needle: str) -> None:
    with pytest.raises(InvalidOption, match=needle):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("bad", ["", "a" * 129, "has space", "slash/", "é"])
def test_bad_id_override_raises_invalid_id(bad: str) -> None:
    with pytest.raises(InvalidId) as err:
        EnqueueOptions(id_override=bad)
    assert err.value.id == bad


def test_queue_name_validation() -> None:
    assert validate_queue_name("") == ""
    assert validate_queue_name("é" * 127) == "é" * 127  # 254 bytes
    with pytest.raises(InvalidQueueName, match="256 bytes"):
        validate_queue_name("x" * 256)
    with pytest.raises(InvalidQueueName, match="UTF-8"):
        validate_queue_name("\udc80")
    with pytest.raises(InvalidQueueName):
        validate_queue_name(b"q")  # type: ignore[arg-type]
    with pytest.raises(InvalidQueueName):
        OpenOptions(queue_configs={"x" * 300: QueueConfig()})


def test_run_at_datetime_converts_to_ms() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert EnqueueOptions(run_at=when).run_at_ms() == int(when.timestamp()) * 1000
    assert EnqueueOptions(run_at=123).run_at_ms() == 123


@pytest.mark.parametrize(
    ("attempts", "base", "maximum", "expected"),
    [
        (1, 1.0, 300.0, 1000),
        (2, 1.0, 300.0, 2000),
        (3, 1.0, 300.0, 4000),
        (4, 1.0, 300.0, 8000),
        (10, 1.0, 300.0, 300_000),
        (200, 1.0, 300.0, 300_000),  # saturates
        (3, 0.0, 300.0, 0),  # base 0: immediate
        (1, 0.25, 0.1, 100),
    ],
)
def test_backoff(attempts: int, base: float, maximum: float, expected: int) -> None:
    assert backoff_ms(attempts, base, maximum) == expected
