"""The queue's errors (semantics 1.28): classification and the exported surface."""

from __future__ import annotations

import pytest

import durable.store.queue as public
from durable import errors

PERMANENT = [
    errors.JobNotFound("j"),
    errors.InvalidState("j", "Pending", "Dead"),
    errors.ClaimLost("j"),
    errors.CancelRequested("j"),
    errors.KvValueTooLarge(b"k", 2, 1),
    errors.InvalidId("x y", "bad"),
    errors.DuplicateJobId("j"),
    errors.InvalidQueueName("q", "bad"),
    errors.PayloadMissing("j"),
    errors.ConflictingKvEffect(b"k"),
    errors.CorruptRecord("k", "bad"),
    errors.InvalidOption("bad"),
]


@pytest.mark.parametrize("err", PERMANENT, ids=lambda e: type(e).__name__)
def test_queue_errors_are_permanent_queue_errors(err: errors.QueueError) -> None:
    assert isinstance(err, errors.QueueError)
    assert isinstance(err, errors.DurableError)
    assert err.transient is False


def test_transient_errors() -> None:
    assert errors.ObjectStoreError("x").transient  # storage / payload store
    assert errors.StoreNotInitialized("memory://x").transient


def test_error_classes_carry_their_fields() -> None:
    e = errors.KvValueTooLarge(b"k", 300, 200)
    assert (e.key, e.size, e.max) == (b"k", 300, 200)
    assert isinstance(e, ValueError)
    assert isinstance(errors.PayloadMissing("j"), LookupError)
    assert isinstance(errors.JobNotFound("j"), LookupError)
    assert "j" in str(errors.ClaimLost("j"))


def test_every_public_name_is_exported_and_documented() -> None:
    assert sorted(public.__all__, key=str.lower) == sorted(set(public.__all__), key=str.lower)
    for name in public.__all__:
        obj = getattr(public, name)
        if isinstance(obj, int | str):
            continue
        assert obj.__doc__, f"{name} has no docstring"
