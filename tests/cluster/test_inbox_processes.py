"""Two real processes submitting the same run ids at once through the inbox
of one store: one run per run id, and `InputMismatch` for the loser when
the inputs differ. The owner (this process) applies the inbox afterwards."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_helpers import QUEUE, Owner, open_owner

from durable.cluster.requests import INBOX_PREFIX
from durable.store.clock import MockClock
from durable.store.objects import open_object_store
from durable.testing.cloud import StoreLocation

CHILD = str(Path(__file__).with_name("inbox_child.py"))
RUNS = 40
pytestmark = pytest.mark.slow


def race(location: StoreLocation, inputs: tuple[str, str]) -> list[dict[str, str]]:
    """Start one child per input, release them together; each one's answers."""
    children = [
        subprocess.Popen(
            [sys.executable, CHILD, *location.argv(), input, str(RUNS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for input in inputs
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    answers = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        answers.append(dict(line.split() for line in out.splitlines()))
    return answers


@contextlib.asynccontextmanager
async def owner_on(location: StoreLocation, clock: MockClock) -> AsyncIterator[Owner]:
    """The store's owner, in this process; closed with its object store."""
    objects = await open_object_store(location.url, location.options)
    try:
        owner = await open_owner(objects, clock)
        try:
            yield owner
        finally:
            await owner.queue.close()
    finally:
        await objects.close()


async def test_two_processes_submitting_the_same_run_ids_make_one_run_each(
    shared_location: StoreLocation, clock: MockClock
) -> None:
    first, second = race(shared_location, ("same", "same"))
    for i in range(RUNS):
        run_id = f"r{i}"
        assert sorted([first[run_id], second[run_id]]) == ["new", "same"], run_id
    async with owner_on(shared_location, clock) as owner:
        assert await owner.applier.apply_now() == RUNS
        assert await owner.queue.writer.objects.list(INBOX_PREFIX) == []
        assert owner.queue.stats(QUEUE).pending == RUNS  # one step 0 per run id
        await owner.run_until_done(f"r{RUNS - 1}")


async def test_two_processes_submitting_other_inputs_get_input_mismatch(
    shared_location: StoreLocation, clock: MockClock
) -> None:
    a, b = race(shared_location, ("a", "b"))
    assert Counter(a.values()) + Counter(b.values()) == Counter(new=RUNS, mismatch=RUNS)
    async with owner_on(shared_location, clock) as owner:
        assert await owner.applier.apply_now() == RUNS
        for i in range(RUNS):
            run_id = f"r{i}"
            winner = b"a" if a[run_id] == "new" else b"b"
            record = owner.runtime.view.run_record(run_id)
            assert record is not None
            assert record.matches_input(winner), run_id
