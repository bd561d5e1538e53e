"""``python -m examples.scheduled_report`` runs a workflow on a schedule."""

from __future__ import annotations

from pathlib import Path

from example_helpers import run_example


def test_scheduled_report_fires_daily_once_after_downtime_and_backfills(tmp_path: Path) -> None:
    out = run_example("scheduled_report", str(tmp_path / "demo"))
    assert "schedule 'scheduled_report_daily': '0 9 * * *' in Europe/Paris" in out
    assert "next fire: 2024-03-01 08:00 UTC" in out  # 09:00 in Paris (CET)
    assert "after day 2: 2 run(s)" in out
    assert "after two days of downtime: 3 runs (one late fire, not two)" in out
    assert "backfill of the last three days asked for 3 fires" in out
    assert "runs now: 4 (fires that ran already started nothing)" in out
    for day in ("01", "02", "03", "04"):
        assert f"scheduled_report_daily-202403{day}T080000Z" in out
