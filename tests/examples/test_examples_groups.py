"""The run-group and typed-job examples run as ``python -m examples.NAME`` and
do what they say."""

from __future__ import annotations

import re
from pathlib import Path

from example_helpers import run_example


def test_group_document_pipeline_resumes_only_the_failed_documents(tmp_path: Path) -> None:
    out = run_example("group_document_pipeline", str(tmp_path / "demo"))
    assert "submitted 6 documents to group 'ingest-batch-1'" in out
    first, second = out.split("resume submitted again:")
    progress = re.findall(r"\[(\d)/6\] ([\w-]+): (\w+)", first)
    assert [int(n) for n, _, _ in progress] == [1, 2, 3, 4, 5, 6]  # one line per document
    failed = {name for _, name, status in progress if status == "failed"}
    assert failed == {"contract-b", "report-2024"}
    assert "pass 1 done: 4 succeeded, 2 failed" in first
    assert second.startswith(" contract-b, report-2024\n")  # only the failed ones again
    rerun = re.findall(r"\[(\d)/6\] ([\w-]+): (\w+)", second)
    assert {status for _, _, status in rerun} == {"succeeded"}
    assert {name for _, name, _ in rerun[-2:]} == {"contract-b", "report-2024"}  # ran last
    assert "all documents: 6/6 succeeded" in out
    # The caller's rollup: the sum of the per-document counters printed in pass 2.
    pages = sum(int(p) for p in re.findall(r"\((\d+) pages", second))
    tokens = sum(int(t) for t in re.findall(r"pages, (\d+) tokens\)", second))
    assert f"totals: {pages} pages, {tokens} tokens" in out
    # Every stage ran once per document: the resumed ones reused their extraction.
    assert "stage runs: extract 6, summarize 6, classify 6 for 6 documents" in out


def test_fanout_jobs_fans_out_joins_and_collapses_duplicates(tmp_path: Path) -> None:
    out = run_example("fanout_jobs", str(tmp_path / "demo"))
    assert "holidays: fanned out 2 thumbnail jobs" in out
    assert "child beach.jpg: 128px, 17 bytes" in out
    assert "child hike.jpg: 128px, 16 bytes" in out
    assert "group 'gallery': img-0.png, img-1.png, img-2.png, img-3.png, img-4.png" in out
    assert "group status: 5/5 succeeded" in out
    assert "cover: Thumb(image='cover.jpg', size=512, nbytes=17), newly submitted: True" in out
    assert "cover again: same job: True, newly submitted: False" in out
    assert "cover again: Thumb(image='cover.jpg', size=512, nbytes=17)" in out
    assert "group again: 0 jobs submitted" in out
    assert "renders since the group's join: 1 (the cover, once)" in out
    assert "total renders: 8" in out  # 2 children, 5 group members, 1 cover
