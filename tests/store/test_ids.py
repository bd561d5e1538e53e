"""`validate_id`: its memory of ids found valid never lets a bad id through."""

from __future__ import annotations

import pytest

from durable.errors import InvalidId
from durable.store import ids


def test_a_valid_id_is_remembered_and_the_memory_stays_bounded() -> None:
    ids._VALID.clear()
    assert ids.validate_id("run-1") == "run-1"
    assert "run-1" in ids._VALID
    for i in range(ids._VALID_MAX + 10):
        ids.validate_id(f"r{i}")
    assert len(ids._VALID) <= ids._VALID_MAX


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "ünï", "a/b"])
def test_bad_ids_are_refused_before_and_after_valid_ones(bad: str) -> None:
    ids.validate_id("good_id")
    with pytest.raises(InvalidId):
        ids.validate_id(bad)
    assert bad not in ids._VALID
    with pytest.raises(InvalidId):
        ids.validate_id(bad)


def test_a_non_str_is_refused_without_being_hashed() -> None:
    with pytest.raises(InvalidId, match="must be a str"):
        ids.validate_id(["run"])  # type: ignore[arg-type]
    with pytest.raises(InvalidId, match="must be a str"):
        ids.validate_id(b"run")  # type: ignore[arg-type]
