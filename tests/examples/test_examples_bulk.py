"""The bulk example runs as ``python -m examples.bulk_jsonl`` and does what it says."""

from __future__ import annotations

import json
import re
from pathlib import Path

from example_helpers import run_example


def test_bulk_jsonl_fails_the_bad_line_and_resumes_only_the_failed_reviews(
    tmp_path: Path,
) -> None:
    out = run_example("bulk_jsonl", str(tmp_path / "demo"))
    first, second = out.split("\npass 2:", 1)
    assert "pass 1: total 7, succeeded 4, failed 3, skipped 0" in first
    assert "  failed: r2, item-3, r5\n" in first  # in input order; the bad line keyed by position
    statuses = dict(re.findall(r"  ([\w-]+): (succeeded|failed) ", first))
    assert statuses == {
        "r1": "succeeded",
        "r2": "failed",
        "r3": "succeeded",
        "r4": "succeeded",
        "r5": "failed",
        "r6": "succeeded",
        "item-3": "failed",
    }
    assert "item-3: failed (bulk item 'item-3' is invalid: line 5: invalid JSON" in first
    assert "r2: failed (translator: quota exceeded)" in first
    # English reviews' tokens (30 + len // 4 each), from the sentiment stage.
    assert "  cost: llm_tokens 158\n" in first

    # Pass 2: only the failed items ran; the bad line fails again.
    assert second.startswith(" total 3, succeeded 2, failed 1, skipped 4\n")
    assert "  failed: item-3\n" in second
    # The re-run reviews read their sentiment from the memo, cost included.
    assert "  cost: llm_tokens 75, translations 2\n" in second
    assert "  sentiment calls in pass 2: 0\n" in second
    assert "output file: 7 records, 6 succeeded" in out
    assert "calls: sentiment 6, translate 2 for 6 reviews" in out

    records = [
        json.loads(line) for line in (tmp_path / "demo" / "scored.jsonl").read_text().splitlines()
    ]
    by_key = {record["key"]: record for record in records}
    assert set(by_key) == {"r1", "r2", "r3", "r4", "r5", "r6", "item-3"}
    assert by_key["r5"]["output"] == {
        "id": "r5",
        "sentiment": "positive",
        "text": "[fr->en] Excellent rapport qualite prix.",
    }
    assert by_key["r6"]["output"]["sentiment"] == "negative"
    assert by_key["item-3"]["status"] == "failed"
