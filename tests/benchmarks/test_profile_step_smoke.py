"""``profile_step --quick`` profiles one sequential run on the local store
and ends with one JSON object whose layers add up to the profiled time."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick


@pytest.mark.slow
def test_profile_step_quick_prints_json_figures() -> None:
    done = run_quick("profile_step", timeout=300)
    assert "functions with the most own time" in done.stdout
    f = last_json(done)
    assert f["steps"] == 50
    assert f["loop_cpu_ms_per_step"] > 0
    assert 0 < f["fdatasync_p50_ms"] < f["wall_ms_per_step"] * 10
    layers = [
        v
        for k, v in f.items()
        if k.endswith("_ms_per_step")
        and k.split("_")[0] in ("select", "engine", "store", "codecs", "asyncio", "other")
    ]
    assert len(layers) >= 5
    # cProfile's own overhead is outside the layers: they add up to at most the profiled time.
    assert sum(layers) <= f["profiled_ms_per_step"] * 1.05
    assert f["select_ms_per_step"] > 0  # waiting for the log's worker thread shows
