"""A worker without the store's key cannot destroy its runs (issue 13, point 4).

The store records, when an Engine first opens it, its codec and the
fingerprints of the signing keys its payloads need; an Engine whose
configuration cannot read them refuses to open (`CodecMismatch`), before
it reads or writes a run. A payload that still fails to verify in a
delivery releases the run (logged), never fails it, and the attempts of
such deliveries are not counted against the run (point 2).

The runs here take a `set`, which the codec pickles (signed with the key).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, promote_due, result, wait_parked

import durable
from durable._logging import capture_logs
from durable.decorators.codec import key_fingerprint
from durable.decorators.codec_record import (
    CODEC_RECORD_KEY,
    CodecRecord,
    decode_record,
    encode_record,
)
from durable.decorators.engine import Engine
from durable.decorators.jobs.service import runner_for
from durable.decorators.progress import decode_mark, progress_key
from durable.engine.runs import Terminated
from durable.errors import CodecMismatch, CorruptEngineRecord, InvalidArgument
from durable.store.clock import MockClock

OLD = b"the old key: 32 random bytes ...."
NEW = b"the new key: 32 other bytes ....."
calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@durable.step(name="record.total")
async def total(items: set[int]) -> set[int]:
    calls["total"] += 1
    return {sum(items)}


@durable.workflow(name="record.add")
async def add(items: set[int]) -> int:
    return sum(await total(items))


@durable.workflow(name="record.add_later")
async def add_later(items: list[int]) -> str:
    try:
        summed = await total(set(items))  # its result is journaled: a pickle, signed
    except Exception as e:  # a refused replay must not land here
        return f"swallowed {type(e).__name__}"
    await durable.sleep(60)
    return f"total {sum(summed)}"


def engine(make_objects: Factory, clock: MockClock, **options: Any) -> Engine:
    return make_engine(make_objects, clock, **options)


def recorded(e: Engine) -> CodecRecord:
    """The store's codec record (every partition's: they are the same)."""
    records = set()
    for part in e.every_partition():
        raw = part.queue.kv.get(CODEC_RECORD_KEY)
        assert raw is not None
        records.add(decode_record(raw))
    assert len(records) == 1
    return records.pop()


async def queued(make_objects: Factory, clock: MockClock, **options: Any) -> str:
    """Start a run of `add` in an engine that runs none (it waits in the store)."""
    async with engine(make_objects, clock, concurrency={"workflows": 0}, **options):
        return (await add.start({1, 2, 3})).run_id


def untouched(e: Engine, run_id: str) -> None:
    """Run ``run_id`` is still queued and was never claimed."""
    part = e.for_run(run_id)
    pointer = part.workflows.default.view.pointer(run_id)
    assert pointer is not None
    job = part.queue.job_record(pointer.job_id)
    assert job is not None
    assert job.attempts == 0


def test_the_fingerprint_is_an_hmac_of_a_label_never_the_key() -> None:
    label = b"durable: the fingerprint of a signing key, v1"
    assert key_fingerprint(OLD) == hmac.new(OLD, label, hashlib.sha256).hexdigest()[:32]
    assert key_fingerprint(OLD.decode()) == key_fingerprint(OLD)
    assert key_fingerprint(OLD) != key_fingerprint(NEW)
    assert durable.Engine("memory://x", signing_key=[NEW, OLD]).codec.fingerprints == (
        key_fingerprint(NEW),
        key_fingerprint(OLD),
    )
    for bad, message in (([], "signing_key is an empty list"), ([OLD, b""], r"signing_key\[1\]")):
        with pytest.raises(InvalidArgument, match=message):
            durable.Engine("memory://x", signing_key=bad)
    for corrupt in (b"", b"\x01", encode_record(CodecRecord("auto"))[:-1]):
        with pytest.raises(CorruptEngineRecord, match="replace_codec_record=True"):
            decode_record(corrupt)
    newer = encode_record(CodecRecord("auto")).replace(b"\xa1v\x01", b"\xa1v\x02")
    with pytest.raises(CorruptEngineRecord, match="upgrade durable"):
        decode_record(newer)


async def test_the_first_engine_records_the_codec_and_fingerprints_durably(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine(make_objects, clock, signing_key=OLD) as e:
        assert recorded(e) == CodecRecord("auto", (key_fingerprint(OLD),))
        for part in e.every_partition():
            raw = part.queue.kv.get(CODEC_RECORD_KEY)
            assert raw is not None
            assert OLD not in raw
    async with engine(make_objects, clock, signing_key=OLD) as e:  # read back from the store
        assert recorded(e) == CodecRecord("auto", (key_fingerprint(OLD),))
    async with engine(make_objects, clock, codec="msgpack", replace_codec_record=True) as e:
        assert recorded(e) == CodecRecord("msgpack")


@pytest.mark.parametrize(
    ("created", "opened", "need"),
    [
        ({"signing_key": OLD}, {}, "its pickles are signed .* this Engine has no signing_key"),
        ({"signing_key": OLD}, {"signing_key": NEW}, "a key this Engine lacks"),
        ({"signing_key": OLD}, {"codec": "msgpack"}, "codec='msgpack' never reads"),
        ({}, {"signing_key": OLD}, "its pickles are unsigned"),
        ({"codec": "msgpack"}, {}, r"created with codec='msgpack' \(plain data only\)"),
    ],
)
async def test_an_engine_that_cannot_read_the_store_refuses_to_open(
    make_objects: Factory,
    clock: MockClock,
    created: dict[str, Any],
    opened: dict[str, Any],
    need: str,
) -> None:
    """Before the record, the keyless worker failed the queued run with
    `UntrustedPayload`; now it does not open, and the run waits untouched
    for an engine that can read it."""
    if created.get("codec") == "msgpack":
        async with engine(make_objects, clock, concurrency={"workflows": 0}, **created):
            run_id = (await add_later.start([1, 2, 3])).run_id
    else:
        run_id = await queued(make_objects, clock, **created)
    with pytest.raises(CodecMismatch, match=need) as e:
        async with engine(make_objects, clock, **opened):
            pytest.fail("the engine opened")
    assert "replace_codec_record=True" in str(e.value)
    async with engine(make_objects, clock, concurrency={"workflows": 0}, **created) as e2:
        untouched(e2, run_id)
    assert calls == {}
    if created.get("codec") != "msgpack":
        async with engine(make_objects, clock, **created) as e3:
            assert await result(e3.handle(run_id)) == 6


async def test_a_store_without_a_record_takes_the_first_engines(
    make_objects: Factory, clock: MockClock
) -> None:
    """A store written before the record existed: the first engine to open it
    records its configuration, and the others are checked against it."""
    run_id = await queued(make_objects, clock, signing_key=OLD)
    async with engine(make_objects, clock, signing_key=OLD, concurrency={"workflows": 0}) as e:
        for part in e.every_partition():  # as an older durable left it
            await part.queue.kv.internal().delete(CODEC_RECORD_KEY)
    async with engine(make_objects, clock, signing_key=OLD, concurrency={"workflows": 0}) as e:
        assert recorded(e) == CodecRecord("auto", (key_fingerprint(OLD),))
    with pytest.raises(CodecMismatch, match="no signing_key"):
        async with engine(make_objects, clock):
            pass
    async with engine(make_objects, clock, signing_key=OLD) as e:
        assert await result(e.handle(run_id)) == 6


async def test_a_key_list_rotates_and_replace_retires_the_old_key(
    make_objects: Factory, clock: MockClock
) -> None:
    before = await queued(make_objects, clock, signing_key=OLD)
    async with engine(make_objects, clock, signing_key=[NEW, OLD]) as e:
        # Rotation: the new key is recorded before the engine runs anything.
        assert recorded(e) == CodecRecord("auto", (key_fingerprint(OLD), key_fingerprint(NEW)))
        assert await result(e.handle(before)) == 6  # signed with the old key
        after = (await add.start({4, 5})).run_id
        assert await result(e.handle(after)) == 9
    for keys in (OLD, NEW):  # each lacks a key the store's pickles may need
        with pytest.raises(CodecMismatch, match="a key this Engine lacks"):
            async with engine(make_objects, clock, signing_key=keys):
                pass
    last = await queued(make_objects, clock, signing_key=[NEW, OLD])
    # Every pickle signed with the old key is gone: retire it, deliberately.
    async with engine(make_objects, clock, signing_key=NEW, replace_codec_record=True) as e:
        assert recorded(e) == CodecRecord("auto", (key_fingerprint(NEW),))
        assert await result(e.handle(last)) == 6
    with pytest.raises(CodecMismatch, match="a key this Engine lacks"):
        async with engine(make_objects, clock, signing_key=OLD):
            pass


async def progressed(e: Engine, run_id: str, step: int, attempt: int) -> None:
    """Wait until the progress mark of ``run_id`` names attempt ``attempt`` of
    its step ``step`` (a release moves it; its commit is durable when the
    watch fires)."""
    kv, key = e.for_run(run_id).queue.kv, progress_key(run_id)

    async def moved() -> None:
        while (raw := kv.get(key)) is None or decode_mark(raw, run_id) < (step, attempt):
            fut = kv.watch(key)  # no await since the read: no write slips through
            try:
                await fut
            finally:
                kv.unwatch(key, fut)

    await asyncio.wait_for(moved(), LIMIT)


async def test_an_unverifiable_argument_releases_the_run_and_never_fails_it(
    make_objects: Factory, clock: MockClock
) -> None:
    """A worker forced past the check (replace_codec_record) with another key
    releases the run at every attempt, more often than the bound without
    progress, and logs it; the correctly keyed engine then runs it."""
    run_id = await queued(make_objects, clock, signing_key=OLD)
    bound = {"max_attempts_without_progress": 2}
    with capture_logs() as logs:
        for attempt in (1, 2, 3, 4):
            async with engine(
                make_objects, clock, signing_key=NEW, replace_codec_record=True, **bound
            ) as e:
                clock.advance(300)  # the queue's backoff since the last release
                promote_due(e)
                await progressed(e, run_id, 0, attempt)
                status = e.for_run(run_id).workflows.default.status(run_id)
                assert status is not None
                assert not isinstance(status.state, Terminated)
    released = [entry for entry in logs if entry["event"].startswith("workflow run released")]
    assert len(released) >= 4  # each engine releases it (its first claim may come
    # before the advance, and then once more after it)
    assert {entry["run_id"] for entry in released} == {run_id}
    assert {entry["log_level"] for entry in released} == {"error"}
    assert "argument 0" in released[0]["what"]
    async with engine(
        make_objects, clock, signing_key=OLD, replace_codec_record=True, **bound
    ) as e:
        clock.advance(300)
        promote_due(e)
        assert await result(e.handle(run_id)) == 6
    assert calls == {"total": 1}


async def test_an_unverifiable_replay_releases_the_run_unseen_by_the_workflow(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine(make_objects, clock, signing_key=OLD) as e:
        handle = await add_later.start([1, 2])
        await wait_parked(e, handle.run_id)  # `total` is journaled (a signed pickle)
    with capture_logs() as logs:
        async with engine(make_objects, clock, signing_key=NEW, replace_codec_record=True) as e:
            clock.advance(60)  # the sleep is over: the replay reads `total`'s result
            promote_due(e)
            await progressed(e, handle.run_id, 1, 1)
    assert [entry["what"] for entry in logs if entry["event"].startswith("workflow run")] == [
        f"the result of the record.total at position 0 of run {handle.run_id!r}"
    ]
    async with engine(make_objects, clock, signing_key=OLD, replace_codec_record=True) as e:
        clock.advance(300)
        promote_due(e)
        assert await result(e.handle(handle.run_id)) == "total 3"
    assert calls == {"total": 1}


@durable.job(name="record.count")
async def count(items: set[int]) -> int:
    calls["count"] += 1
    return len(items)


async def test_an_unverifiable_job_argument_is_retried_not_failed_at_once(
    make_objects: Factory, clock: MockClock
) -> None:
    """A job has its own attempts (the queue's 3): a refused argument is
    logged and retried within them, so the correctly keyed engine can still
    run it; before, the job failed at its first attempt."""
    async with engine(make_objects, clock, signing_key=OLD, concurrency={"jobs": 0}):
        job_id = (await count.submit({1, 2, 3})).job_id
    with capture_logs() as logs:
        async with engine(make_objects, clock, signing_key=NEW, replace_codec_record=True) as e:
            runtime = runner_for(e.for_run(job_id), count.job_type).runtime

            async def released() -> None:  # the queue holds no watch for a retry
                while True:
                    pointer = runtime.view.pointer(job_id)
                    queue = e.for_run(job_id).queue
                    record = queue.job_record(pointer.job_id) if pointer else None
                    if record is not None and record.last_error is not None:
                        return
                    await asyncio.sleep(0)

            await asyncio.wait_for(released(), LIMIT)
    assert [(entry["job_id"], entry["log_level"]) for entry in logs if "job_id" in entry] == [
        (job_id, "error")
    ]
    async with engine(make_objects, clock, signing_key=OLD, replace_codec_record=True) as e:
        clock.advance(300)
        promote_due(e)
        assert await result(count.handle(job_id)) == 3
    assert calls == {"count": 1}
