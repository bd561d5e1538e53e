"""The crash torture (`torture`) in the suite: 20 kill -9 cycles of a mixed
decorator workload, on a local directory and on S3 (moto).

The kill schedule's seed is random and printed (in the failure message
too); ``DURABLE_TORTURE_SEED`` pins it, ``DURABLE_TORTURE_KILLS`` changes
the number of kills. ``python -m tests.crash.torture --kills 200`` runs a
longer one.

Known limit while issue 13's point 2 is open: the workload's long run is in
flight at every kill, and a run whose deliveries are interrupted more than
25 times fails ("claim interrupted by process exit"); 20 kills stay below.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest
from torture import torture

from durable.testing import cloud

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("DURABLE_TORTURE_KILLS", "20"))


def _seed() -> int:
    pinned = os.environ.get("DURABLE_TORTURE_SEED")
    return int(pinned) if pinned else random.SystemRandom().randrange(2**32)


def _run(backend: str, tmp_path: Path) -> None:
    where = asyncio.run(cloud.new_location(backend, tmp_path))
    seed = _seed()
    print(f"torture seed={seed} kills={KILLS} on {backend}")
    report = torture(where, KILLS, seed, tmp_path)
    print(report.summary())
    assert not report.problems, f"{report.summary()}:\n" + "\n".join(report.problems)
    assert report.reruns > 0  # the kills did cut steps short: the check checked something


@pytest.mark.timeout(600)
def test_torture_on_a_local_store(tmp_path: Path) -> None:
    _run("local", tmp_path)


@pytest.mark.emulator
@pytest.mark.timeout(900)
def test_torture_on_s3(tmp_path: Path) -> None:
    if not cloud.available("s3"):
        pytest.skip(f"{cloud.ENV['s3']} is unset: start the emulators with scripts/test")
    _run("s3", tmp_path)
