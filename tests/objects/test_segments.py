"""The segment log medium (`SegmentObjectStore`): framing, torn tails,
mid-log corruption, rolling and trimming, the writer's lock, URLs.

Everything runs on real files in ``tmp_path``; a "crash" is the files left
as a dead writer would leave them (cut, zero-filled or with a flipped byte).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path

import pytest

from durable.errors import CorruptObject, LogLocked, ObjectExists, ObjectStoreError
from durable.store.log import LogOptions, LogReader, LogWriter, WriteBatch
from durable.store.objects import LocalObjectStore, SegmentObjectStore, open_object_store, segments
from durable.store.objects.segments import decode_records, encode_record

HEADER = 20  # magic, seq, length, crc


def log(seq: int) -> str:
    return f"log/{seq:020d}"


def segment_files(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / "segments") if n.endswith(".seg"))


async def written(root: Path, bodies: list[bytes], **kw: int) -> SegmentObjectStore:
    """A claimed store holding ``bodies`` as log records 1..n."""
    store = SegmentObjectStore(root, **kw)
    await store.claim_log()
    for i, body in enumerate(bodies, 1):
        await store.create(log(i), body)
    return store


# ------------------------------------------------------------------ framing


def test_a_record_round_trips_and_every_flipped_byte_is_caught() -> None:
    body = b"some log object bytes"
    rec = encode_record(7, body)
    scan = decode_records("seg", rec, first_seq=7, last=False)
    assert scan.records == [(7, HEADER, len(body))]
    assert scan.end == len(rec)
    for i in range(len(rec)):  # the CRC covers magic, seq, length and body
        bad = bytearray(rec)
        bad[i] ^= 0x01
        with pytest.raises(CorruptObject) as err:
            decode_records("seg", bytes(bad) + encode_record(8, b"x"), first_seq=7, last=True)
        assert "offset 0" in str(err.value)


def test_records_must_hold_consecutive_seqs() -> None:
    data = encode_record(1, b"a") + encode_record(3, b"b")
    with pytest.raises(CorruptObject, match="holds seq 3, expected 2"):
        decode_records("seg", data, first_seq=1, last=True)


# -------------------------------------------------------------- torn tails


async def test_every_truncation_of_the_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    bodies = [b"first" * 5, b"second" * 5, b"third" * 5]
    store = await written(tmp_path / "orig", bodies)
    await store.close()
    seg = tmp_path / "orig" / "segments" / "00000000000000000001.seg"
    full = seg.read_bytes()
    last_at = len(full) - HEADER - len(bodies[2])
    for cut in range(last_at + 1, len(full)):
        root = tmp_path / f"cut{cut}"
        (root / "segments").mkdir(parents=True)
        (root / "segments" / seg.name).write_bytes(full[:cut])
        reader = SegmentObjectStore(root)
        assert await reader.list("log/") == [log(1), log(2)]  # a reader never truncates
        assert (root / "segments" / seg.name).stat().st_size == cut
        writer = SegmentObjectStore(root)
        await writer.claim_log()  # the writer truncates the torn record away
        assert (root / "segments" / seg.name).stat().st_size == last_at
        await writer.create(log(3), b"again")
        assert await SegmentObjectStore(root).get(log(3)) == b"again"
        assert await SegmentObjectStore(root).get(log(2)) == bodies[1]
        await writer.close()


async def test_zeros_after_the_last_record_are_a_torn_tail(tmp_path: Path) -> None:
    store = await written(tmp_path, [b"a", b"b"])
    await store.close()
    seg = tmp_path / "segments" / "00000000000000000001.seg"
    size = seg.stat().st_size
    seg.write_bytes(seg.read_bytes() + bytes(4096))  # the size grew, the data never landed
    writer = SegmentObjectStore(tmp_path)
    await writer.claim_log()
    assert seg.stat().st_size == size
    assert await writer.list("log/") == [log(1), log(2)]
    await writer.close()


async def test_a_torn_marker_at_open_leaves_the_state_of_the_durable_log(tmp_path: Path) -> None:
    w = await LogWriter.open(SegmentObjectStore(tmp_path))
    await w.commit(WriteBatch().put(b"k", b"v"))
    await w.commit(WriteBatch().put(b"k2", b"v2"))
    w.stop(ObjectStoreError("the process died"))  # no final checkpoint
    await w.close()
    seg = tmp_path / "segments" / segment_files(tmp_path)[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-3])  # the last commit was cut short: never reported durable
    w2 = await LogWriter.open(SegmentObjectStore(tmp_path))
    assert w2.state.get(b"k") == b"v"
    assert w2.state.get(b"k2") is None
    await w2.close()


# ------------------------------------------------------ mid-log corruption


async def test_a_bad_record_before_the_tail_is_corrupt_and_nothing_is_truncated(
    tmp_path: Path,
) -> None:
    store = await written(tmp_path, [b"one" * 4, b"two" * 4, b"three" * 4])
    await store.close()
    seg = tmp_path / "segments" / "00000000000000000001.seg"
    data = bytearray(seg.read_bytes())
    second = HEADER + 12
    data[second + HEADER + 2] ^= 0xFF  # a byte of record 2's body
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptObject) as err:
        await SegmentObjectStore(tmp_path).list("log/")
    assert err.value.name == str(seg)
    assert f"offset {second}" in str(err.value)
    writer = SegmentObjectStore(tmp_path)
    with pytest.raises(CorruptObject, match=f"offset {second}"):
        await writer.claim_log()
    assert seg.read_bytes() == bytes(data)  # nothing truncated
    # the failed claim released the lock: a later claim is refused for the
    # corruption again, not for a lock
    with pytest.raises(CorruptObject):
        await SegmentObjectStore(tmp_path).claim_log()


async def test_a_bad_record_in_a_closed_segment_is_corrupt(tmp_path: Path) -> None:
    store = await written(tmp_path, [b"x" * 40 for _ in range(4)], segment_bytes=100)
    await store.close()
    names = segment_files(tmp_path)
    assert len(names) == 2
    first = tmp_path / "segments" / names[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # its last record: torn-looking, but a segment follows
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptObject) as err:
        await SegmentObjectStore(tmp_path).claim_log()
    assert err.value.name == str(first)
    assert first.read_bytes() == bytes(data)


# ------------------------------------------------------- roll and removal


async def test_segments_roll_at_their_size(tmp_path: Path) -> None:
    store = await written(tmp_path, [b"y" * 50 for _ in range(7)], segment_bytes=150)
    # a segment takes records until it holds >= 150 bytes: two of 70 bytes each, then a third
    assert segment_files(tmp_path) == [
        "00000000000000000001.seg",
        "00000000000000000004.seg",
        "00000000000000000007.seg",
    ]
    assert await SegmentObjectStore(tmp_path).list("log/") == [log(s) for s in range(1, 8)]
    with pytest.raises(ObjectExists):
        await store.create(log(7), b"again")
    await store.close()


async def test_deleting_log_names_removes_the_closed_segments_they_cover(tmp_path: Path) -> None:
    store = await written(tmp_path, [b"y" * 50 for _ in range(7)], segment_bytes=150)
    await store.delete([log(s) for s in range(1, 6)])  # covers segment 1-3 only
    assert segment_files(tmp_path) == ["00000000000000000004.seg", "00000000000000000007.seg"]
    await store.delete([log(s) for s in range(1, 8)])  # never the current segment
    assert segment_files(tmp_path) == ["00000000000000000007.seg"]
    assert await SegmentObjectStore(tmp_path).list("log/") == [log(7)]
    await store.close()


async def test_a_checkpoint_removes_covered_segments_and_reopen_keeps_every_commit(
    tmp_path: Path,
) -> None:
    opts = LogOptions(checkpoint_max_objects=4)
    w = await LogWriter.open(SegmentObjectStore(tmp_path, segment_bytes=300), opts)
    reader = await LogReader.open(SegmentObjectStore(tmp_path))
    for i in range(40):
        await w.commit(WriteBatch().put(b"k%02d" % i, b"v" * 40))
        if i % 7 == 0:
            await reader.poll()
    await w.wait_idle()
    # The checkpoints made as the log grew (one at a time: a due one is
    # skipped while another is written) removed the oldest segments.
    assert segment_files(tmp_path)[0] != "00000000000000000001.seg"
    await w.checkpoint()  # covers everything: only the current segment is left
    assert len(segment_files(tmp_path)) == 1
    await reader.refresh()
    assert len(reader.state) == 40
    await w.close()
    w2 = await LogWriter.open(SegmentObjectStore(tmp_path))
    assert [k for k, _ in w2.state.scan()] == [b"k%02d" % i for i in range(40)]
    await w2.close()


async def test_a_listing_made_while_a_trim_removed_segments_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader's listing may hold a segment a trim removed meanwhile and
    miss the ones after it (a directory read during deletions): the chain
    that breaks at a removed segment is no corruption; the reader lists
    again."""
    store = await written(tmp_path, [b"r%d" % i for i in range(1, 7)], segment_bytes=1)
    await store.close()
    files = segment_files(tmp_path)
    assert len(files) == 6  # a segment per record
    for gone in files[:2]:  # trimmed behind a checkpoint
        (tmp_path / "segments" / gone).unlink()
    listings: list[list[str]] = []
    real = os.listdir

    def listdir(path: str) -> list[str]:
        names = real(path)
        if path.endswith("segments"):
            if not listings:
                names = [files[0], files[-1]]  # a removed one, and the last
            listings.append(names)
        return names

    monkeypatch.setattr(segments.os, "listdir", listdir)
    reader = SegmentObjectStore(tmp_path)
    assert await reader.list("log/") == [log(i) for i in range(3, 7)]
    assert await reader.get(log(3)) == b"r3"
    assert listings[0] == [files[0], files[-1]]
    assert len(listings) >= 2


async def test_every_segment_a_writer_appends_to_is_opened_o_dsync(tmp_path: Path) -> None:
    """An append is one ``write`` that returns once durable (no ``fdatasync``
    after it): the writer's file must be ``O_DSYNC``, after a roll too."""
    store = await written(tmp_path, [b"a" * 40] * 6, segment_bytes=64)  # rolls
    segs = store._log_of("")
    assert segs.fd is not None
    assert fcntl.fcntl(segs.fd, fcntl.F_GETFL) & os.O_DSYNC == os.O_DSYNC
    assert len(os.listdir(tmp_path / "segments")) > 2  # it rolled
    await store.close()


# ------------------------------------------------------- where appends run


async def _appended_in(
    store: SegmentObjectStore, seq: int, *, busy: bool, body: bytes = b"x"
) -> int:
    """The thread that appended record ``seq`` (with another task ready to
    run on the loop if ``busy``)."""
    segs = store._log_of("")
    threads: list[int] = []
    append = segs.append

    def noting(s: int, body: bytes, *, inline: bool = False) -> None:
        append(s, body, inline=inline)  # a deferred one raises before writing
        threads.append(threading.get_ident())

    segs.append = noting  # type: ignore[method-assign]
    other = None
    try:
        if busy:
            other = asyncio.ensure_future(asyncio.sleep(0))
        await store.create(log(seq), body)
    finally:
        del segs.append
        if other is not None:
            await other
    return threads[0]


async def test_appends_run_on_the_loop_while_it_is_idle_and_the_disk_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await written(tmp_path, [b"a"] * 20)  # the average of 20 appends
    loop_thread = threading.get_ident()
    monkeypatch.setattr(segments, "INLINE_APPEND_MAX", 10.0)
    assert await _appended_in(store, 21, busy=False) == loop_thread
    # Another task ready: a small group is appended at once all the same,
    # a large one in a thread, the loop going on with the rest meanwhile.
    big = b"x" * (segments.INLINE_APPEND_BYTES + 1)
    assert await _appended_in(store, 22, busy=True) == loop_thread
    assert await _appended_in(store, 23, busy=True, body=big) != loop_thread
    assert await _appended_in(store, 24, busy=False, body=big) == loop_thread
    # A slow disk (recent appends over the bound) never blocks the loop.
    monkeypatch.setattr(segments, "INLINE_APPEND_MAX", 0.0)
    assert await _appended_in(store, 25, busy=False) != loop_thread
    monkeypatch.setattr(segments, "INLINE_APPEND_MAX", 10.0)
    # A thread holds the log (a listing): the append waits in a thread, not the loop.
    segs = store._log_of("")
    with segs.lock:
        task = asyncio.create_task(_appended_in(store, 26, busy=False))
        await asyncio.sleep(0)
        assert not task.done()
    assert await task != loop_thread
    await store.close()
    reopened = SegmentObjectStore(tmp_path)
    assert await reopened.list("log/") == [log(i) for i in range(1, 27)]


async def test_an_append_that_must_roll_or_rescan_first_runs_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never on the loop: a roll (files made and synced) or a re-scan after
    another writer's append (which may wait for its torn tail)."""
    monkeypatch.setattr(segments, "INLINE_APPEND_MAX", 10.0)
    loop_thread = threading.get_ident()
    rolling = await written(tmp_path / "roll", [b"a"] * 5, segment_bytes=1)  # a roll each
    assert await _appended_in(rolling, 6, busy=False) != loop_thread
    await rolling.close()
    store = await written(tmp_path / "other", [b"a"] * 5)
    assert await _appended_in(store, 6, busy=False) == loop_thread
    seg = tmp_path / "other" / "segments" / "00000000000000000001.seg"
    # Another writer's late entry for a taken slot (a loser), at the end.
    seg.write_bytes(seg.read_bytes() + encode_record(3, b"late"))
    assert await _appended_in(store, 7, busy=False) != loop_thread
    assert await _appended_in(store, 8, busy=False) == loop_thread
    await store.close()
    reopened = SegmentObjectStore(tmp_path / "other")
    assert await reopened.list("log/") == [log(i) for i in range(1, 9)]
    assert await reopened.get(log(3)) == b"a"


# ------------------------------------------------------------------ fencing


async def test_a_second_writer_is_refused_naming_the_lock_file(tmp_path: Path) -> None:
    w = await LogWriter.open(SegmentObjectStore(tmp_path))
    with pytest.raises(LogLocked) as err:
        await LogWriter.open(SegmentObjectStore(tmp_path))
    assert err.value.path == str(tmp_path / "segments" / "lock")
    assert "segments/lock" in str(err.value)
    await w.close()  # releases the lock
    w2 = await LogWriter.open(SegmentObjectStore(tmp_path))
    await w2.close()


async def test_only_a_claimed_store_appends(tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreError, match="not claimed"):
        await SegmentObjectStore(tmp_path).create(log(1), b"x")


# --------------------------------------------------------------------- URLs


async def test_urls_choose_the_medium(tmp_path: Path) -> None:
    plain = await open_object_store(tmp_path / "plain")
    assert isinstance(plain, SegmentObjectStore)  # a new local directory: segments
    objects = tmp_path / "objects"
    w0 = await LogWriter.open(LocalObjectStore(objects))
    await w0.commit(WriteBatch().put(b"k", b"v"))
    await w0.close()
    assert type(await open_object_store(objects)) is LocalObjectStore  # its log is objects
    assert type(await open_object_store(f"file://{objects}")) is LocalObjectStore
    seg = await open_object_store(f"segments://{tmp_path / 'seg'}")
    assert isinstance(seg, SegmentObjectStore)
    w = await LogWriter.open(seg)
    await w.commit(WriteBatch().put(b"k", b"v"))
    # once it holds segments, a plain path opens the segment medium too
    again = await open_object_store(tmp_path / "seg")
    assert isinstance(again, SegmentObjectStore)
    reader = await LogReader.open(again)
    assert reader.state.get(b"k") == b"v"
    await w.close()


async def test_a_store_whose_log_is_objects_is_refused(tmp_path: Path) -> None:
    w = await LogWriter.open(LocalObjectStore(tmp_path))
    await w.commit(WriteBatch().put(b"k", b"v"))
    w.stop(ObjectStoreError("stop"))
    await w.close()
    with pytest.raises(ObjectStoreError, match="already objects"):
        await LogWriter.open(SegmentObjectStore(tmp_path))


# ----------------------------------------------------------------- takeover


async def test_a_takeover_passes_a_live_lock_and_a_plain_open_then_finds_it_held(
    tmp_path: Path,
) -> None:
    a = await written(tmp_path, [b"a1"])
    b = SegmentObjectStore(tmp_path)
    await b.claim_log(takeover=True)  # a still holds its flock: b replaces the lock file
    with pytest.raises(LogLocked):
        await SegmentObjectStore(tmp_path).claim_log()  # the new lock is b's
    await a.close()
    with pytest.raises(LogLocked):
        await SegmentObjectStore(tmp_path).claim_log()  # a's release frees only its old file
    await b.close()
    c = SegmentObjectStore(tmp_path)
    await c.claim_log()
    await c.close()


async def test_each_slot_goes_to_its_first_entry_and_a_late_writer_loses(tmp_path: Path) -> None:
    a = await written(tmp_path, [b"a1", b"a2", b"a3"])
    b = SegmentObjectStore(tmp_path)
    await b.claim_log(takeover=True)
    await a.create(log(4), b"a4")  # a, stalled past the takeover, appends first: slot 4 is a's
    with pytest.raises(ObjectExists):
        await b.create(log(4), b"b4")  # b's entry for 4 is a loser
    assert await b.get(log(4)) == b"a4"
    await b.create(log(5), b"b5")
    with pytest.raises(ObjectExists):
        await a.create(log(5), b"a5")  # a's next append loses: it is fenced
    reader = SegmentObjectStore(tmp_path)
    assert await reader.list("log/") == [log(i) for i in range(1, 6)]
    assert [await reader.get(log(i)) for i in (4, 5)] == [b"a4", b"b5"]
    await a.close()
    await b.close()
    # The losers stay in the file until the next clean claim cuts them.
    fresh = SegmentObjectStore(tmp_path)
    await fresh.claim_log()
    assert [await fresh.get(log(i)) for i in range(1, 6)] == [b"a1", b"a2", b"a3", b"a4", b"b5"]
    await fresh.create(log(6), b"f6")
    assert await SegmentObjectStore(tmp_path).list("log/") == [log(i) for i in range(1, 7)]


async def test_a_stalled_writer_that_wakes_at_a_roll_loses_it(tmp_path: Path) -> None:
    a = await written(tmp_path, [b"x" * 60, b"x" * 60], segment_bytes=100)
    b = SegmentObjectStore(tmp_path, segment_bytes=100)
    await b.claim_log(takeover=True)
    await b.create(log(3), b"b3")  # b rolls: a roll entry for 3, then segment 3
    with pytest.raises(ObjectExists):
        await a.create(log(3), b"a3")  # a would roll too: its slot is taken
    assert segment_files(tmp_path) == [f"{1:020d}.seg", f"{3:020d}.seg"]
    assert await SegmentObjectStore(tmp_path).get(log(3)) == b"b3"
    await a.close()
    await b.close()


async def test_a_writer_whose_roll_came_first_leads_the_taker_to_its_segment(
    tmp_path: Path,
) -> None:
    a = await written(tmp_path, [b"x" * 60, b"x" * 60], segment_bytes=100)
    b = SegmentObjectStore(tmp_path, segment_bytes=100)
    await b.claim_log(takeover=True)
    await a.create(log(3), b"a3")  # a rolls first and takes slot 3 in segment 3
    with pytest.raises(ObjectExists):
        await b.create(log(3), b"b3")
    assert await b.get(log(3)) == b"a3"
    await b.create(log(4), b"b4")  # b follows the roll into segment 3
    with pytest.raises(ObjectExists):
        await a.create(log(4), b"a4")
    reader = SegmentObjectStore(tmp_path)
    assert [await reader.get(log(i)) for i in (3, 4)] == [b"a3", b"b4"]
    assert segment_files(tmp_path) == [f"{1:020d}.seg", f"{3:020d}.seg"]
    await a.close()
    await b.close()


async def test_a_crash_between_a_roll_and_its_segment_leaves_the_log_whole(
    tmp_path: Path,
) -> None:
    store = await written(tmp_path, [b"x" * 60, b"x" * 60, b"y"], segment_bytes=100)
    await store.close()
    second = tmp_path / "segments" / f"{3:020d}.seg"
    # The crash came after the roll entry for 3 was durable, before segment 3 held anything.
    second.write_bytes(b"")
    w = SegmentObjectStore(tmp_path, segment_bytes=100)
    await w.claim_log()
    assert await w.list("log/") == [log(1), log(2)]
    await w.create(log(3), b"again")  # into the empty segment 3
    # ... and before segment 3 was made at all.
    await w.close()
    second.unlink()
    w = SegmentObjectStore(tmp_path, segment_bytes=100)
    await w.claim_log()
    assert await w.list("log/") == [log(1), log(2)]
    await w.create(log(3), b"made")
    assert await SegmentObjectStore(tmp_path).get(log(3)) == b"made"
    await w.close()


async def test_partitions_keep_one_segment_log_each(tmp_path: Path) -> None:
    from durable.store.objects import PrefixedObjectStore

    root = SegmentObjectStore(tmp_path)
    writers = [await LogWriter.open(PrefixedObjectStore(root, f"p{p:03d}/")) for p in range(3)]
    for p, w in enumerate(writers):
        await w.commit(WriteBatch().put(b"k", b"p%d" % p))
    for p in range(3):
        assert (tmp_path / f"p{p:03d}" / "segments" / "lock").exists()
        assert not (tmp_path / f"p{p:03d}" / "log").exists()
        with pytest.raises(LogLocked):  # each partition's log has its own lock
            await LogWriter.open(PrefixedObjectStore(SegmentObjectStore(tmp_path), f"p{p:03d}/"))
    for w in writers:
        await w.close()
    plain = await open_object_store(tmp_path)  # a plain path finds the partitions' segments
    assert isinstance(plain, SegmentObjectStore)
    for p in range(3):
        r = await LogReader.open(PrefixedObjectStore(plain, f"p{p:03d}/"))
        assert r.state.get(b"k") == b"p%d" % p
    assert not any(n.startswith("p000/segments") for n in await plain.list(""))
    assert [n for n in await plain.list("p001/") if "log/" in n]  # its log names are listed


async def test_a_takeover_waits_for_a_torn_entry_a_live_writer_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments, "_TORN_WAIT", 1.0)
    a = await written(tmp_path, [b"a1"])
    seg = tmp_path / "segments" / segment_files(tmp_path)[0]
    entry = encode_record(2, b"a2, written in two pieces")
    with seg.open("ab") as f:
        f.write(entry[:10])  # a live writer half way through its write

    def finish() -> None:
        with seg.open("ab") as f:
            f.write(entry[10:])

    threading.Timer(0.2, finish).start()
    b = SegmentObjectStore(tmp_path)
    await b.claim_log(takeover=True)  # waits until the entry is whole; cuts nothing
    assert await b.get(log(2)) == b"a2, written in two pieces"
    await b.create(log(3), b"b3")
    assert await SegmentObjectStore(tmp_path).list("log/") == [log(1), log(2), log(3)]
    await a.close()
    await b.close()


async def test_a_torn_entry_that_stays_is_a_dead_writers_and_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments, "_TORN_WAIT", 0.3)
    a = await written(tmp_path, [b"a1"])
    seg = tmp_path / "segments" / segment_files(tmp_path)[0]
    whole = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(encode_record(2, b"never finished")[:15])  # its writer was killed mid-write
    b = SegmentObjectStore(tmp_path)
    await b.claim_log(takeover=True)  # the lock's holder lives (a): a takeover
    assert seg.stat().st_size == whole  # the torn bytes were cut after they stayed
    await b.create(log(2), b"b2")
    assert await SegmentObjectStore(tmp_path).get(log(2)) == b"b2"
    await a.close()
    await b.close()


async def test_segments_rolled_before_roll_entries_still_chain(tmp_path: Path) -> None:
    """A store the opt-in medium of an earlier release wrote: a segment ends
    at its last record and the next is named after the record that follows."""
    seg_dir = tmp_path / "segments"
    seg_dir.mkdir()
    (seg_dir / f"{1:020d}.seg").write_bytes(encode_record(1, b"r1") + encode_record(2, b"r2"))
    (seg_dir / f"{3:020d}.seg").write_bytes(encode_record(3, b"r3"))
    store = SegmentObjectStore(tmp_path)
    await store.claim_log()
    assert await store.list("log/") == [log(1), log(2), log(3)]
    await store.create(log(4), b"r4")
    assert [await SegmentObjectStore(tmp_path).get(log(i)) for i in range(1, 5)] == [
        b"r1",
        b"r2",
        b"r3",
        b"r4",
    ]
    await store.close()
