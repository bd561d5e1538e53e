"""Exclusive keys (`durable.engine.exclusive`): the decision, without a store."""

from __future__ import annotations

import pytest

from durable.engine.exclusive import (
    Holder,
    check_exclusive,
    decode_holder,
    encode_holder,
    exclusive_key,
)
from durable.errors import CorruptEngineRecord, DuplicateStart


def test_a_key_is_free_unless_another_active_run_holds_it() -> None:
    key = exclusive_key("wf", "k")
    mine = {key: encode_holder(Holder("r2", "k", "wf")), b"workflow/other": b"x"}
    stored: dict[bytes, bytes] = {}
    assert check_exclusive(mine, stored.get, lambda run: True) == [key]  # no record: free
    stored[key] = encode_holder(Holder("r1", "k", "wf"))
    assert check_exclusive(mine, stored.get, lambda run: False) == [key]  # r1 ended
    with pytest.raises(DuplicateStart) as e:
        check_exclusive(mine, stored.get, lambda run: run == "r1")
    assert (e.value.run_id, e.value.key, e.value.workflow) == ("r1", "k", "wf")
    stored[key] = encode_holder(Holder("r2", "k", "wf"))  # its own record (a resubmission)
    assert check_exclusive(mine, stored.get, lambda run: True) == [key]
    assert check_exclusive(None, stored.get, lambda run: True) == []


def test_keys_of_two_workflows_never_collide() -> None:
    assert exclusive_key("a/b", "c") != exclusive_key("a", "b/c")


def test_a_corrupt_holder_is_named() -> None:
    assert decode_holder(encode_holder(Holder("r", "k", "w"))) == Holder("r", "k", "w")
    for bad in [b"", b"\xc1", encode_holder(Holder("r", "k", "w"))[:-1]]:
        with pytest.raises(CorruptEngineRecord, match="exclusive-key holder"):
            decode_holder(bad)
