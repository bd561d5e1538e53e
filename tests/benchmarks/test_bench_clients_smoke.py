"""``bench_clients --quick`` runs one worker, a standby and four clients in
processes and ends with one JSON object of sane figures."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick

ROLES = ("worker", "standby", "client")
EXPECTED = {
    "inproc_runs_per_s",
    "client_runs_per_s",
    "client_vs_inproc_runs_per_s",
    "inproc_p50_ms",
    "inproc_p99_ms",
    "client_p50_ms",
    "client_p99_ms",
    "client_vs_inproc_p50",
    "takeover_after_kill_s",
    "takeover_after_sigterm_s",
    "sigterm_exit_s",
    "first_run_after_takeover_ms",
    *(f"idle_{r}_{x}" for r in ROLES for x in ("requests_per_s", "usd_per_day", "cpu_pct")),
}


@pytest.mark.slow
def test_bench_clients_quick_prints_json_figures() -> None:
    done = run_quick("bench_clients", timeout=300)
    assert "takeover after kill -9" in done.stderr  # progress on stderr, figures on stdout
    figures = last_json(done)
    assert figures["quick"] is True
    assert figures.keys() >= {f"local_{k}" for k in EXPECTED}
    assert not any(k.startswith("latency_") for k in figures)  # --quick: local only
    numbers = {k: v for k, v in figures.items() if k != "quick"}
    assert all(isinstance(v, int | float) and v >= 0 for v in numbers.values())
    assert all(k == k.lower() and " " not in k for k in figures)
    f = {k.removeprefix("local_"): v for k, v in figures.items()}
    assert f["ttl_s"] == 4.0
    assert f["heartbeat_s"] == 0.5
    assert f["inproc_runs_per_s"] > 0
    assert f["client_runs_per_s"] > 0
    assert 0 < f["inproc_p50_ms"] <= f["inproc_p99_ms"]
    assert 0 < f["client_p50_ms"] <= f["client_p99_ms"]
    # A local directory is polled every few ms while busy: a client's run is
    # not paced by the object stores' 0.2 s (that was 12x in-process).
    assert f["client_vs_inproc_p50"] < 8
    # Takeover: a host lock (kill -9) or the release (SIGTERM), within a
    # heartbeat or two (0.5 s) plus the slack of a busy machine.
    assert 0 < f["takeover_after_kill_s"] < 5
    assert 0 < f["takeover_after_sigterm_s"] < 5
    # Idle: every member heartbeats (a PUT per 0.5 s here), a standby and a
    # client poll the log's tail, the owner its inbox, backed off to 50 ms:
    # tens of requests a second, not the ~350 of a 2 ms poll.
    assert f["idle_worker_member_put_per_s"] > 0
    assert f["idle_standby_member_put_per_s"] > 0
    assert "idle_client_member_put_per_s" not in f  # a client is no member
    assert f["idle_worker_inbox_list_per_s"] > 0
    assert f["idle_client_log_get_per_s"] > 0
    for role in ROLES:
        assert f[f"idle_{role}_requests_per_s"] < 100
