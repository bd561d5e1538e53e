"""How a bulk item is stored: its run input (the item) and its run result.

An item's run input is the MessagePack map ``{"key": KEY, "input": VALUE}``,
map keys sorted at every level (so equal inputs are equal bytes, which is
what a run group compares when a batch is submitted again) and dataclasses
stored as the map of their fields by name. An `InvalidItem` (an input that
could not be read, like a bad JSONL line) is stored as ``{"key": KEY,
"invalid": REASON}``: its run fails permanently without running the
pipeline. Values follow the memo's plain-data rules
(`durable.engine.memo_codec`) and read back in their decoded form: tuples
as lists, dataclasses as dicts.

A succeeded item's run result is the envelope ``{"output": VALUE, "cost":
{metric: amount, ...}}`` (`CostReport.to_map`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from durable.engine._checks import check_str
from durable.engine.bulk.cost import CostReport
from durable.engine.memo_codec import canonical, plain_default  # the memo's plain-data rules
from durable.errors import CorruptEngineRecord, InvalidArgument

__all__ = [
    "BulkItem",
    "InvalidItem",
    "decode_item",
    "decode_result",
    "encode_item",
    "encode_result",
]

_PLAIN = "plain data (None, bool, int, float, str, bytes, list, tuple, dict, dataclass)"


@dataclass(frozen=True, slots=True)
class InvalidItem:
    """An input that could not be read (``reason`` says why; ``line`` is its
    line number when it came from a file).

    Give one to `Bulk.run` among the inputs: it becomes an item whose run
    fails permanently with ``reason``, counted and reported like any failed
    item, instead of stopping the whole batch.
    """

    reason: str
    line: int | None = None

    def __post_init__(self) -> None:
        check_str("InvalidItem.reason", self.reason)


@dataclass(frozen=True, slots=True)
class BulkItem:
    """A decoded run input: the item's key, and its input or why it is invalid."""

    key: str
    input: Any = None
    invalid: str | None = None


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_item(key: str, item: Any) -> bytes:
    """The run input of ``item`` under ``key``; `InvalidArgument` naming the key
    if the input is not plain data."""
    body = (
        {"key": key, "invalid": item.reason}
        if isinstance(item, InvalidItem)
        else {"key": key, "input": item}
    )
    try:
        return msgpack.packb(canonical(body), default=plain_default, use_bin_type=True)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise InvalidArgument(
            f"bulk item {key!r}: its input cannot be stored ({e}); inputs must be {_PLAIN}"
        ) from None


def decode_item(payload: bytes, run_id: str) -> BulkItem:
    """The item stored as ``payload``; `CorruptEngineRecord` (permanent) if it
    is not a bulk item."""
    what = f"input of bulk run {run_id!r}"
    try:
        body = _unpack(payload)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from None
    key = body.get("key") if isinstance(body, dict) else None
    if not isinstance(key, str):
        raise CorruptEngineRecord(what, f"not a bulk item (no 'key'): {body!r:.200}")
    if "invalid" in body:
        return BulkItem(key, invalid=str(body["invalid"]))
    if "input" not in body:
        raise CorruptEngineRecord(what, f"bulk item {key!r} has no 'input'")
    return BulkItem(key, body["input"])


def encode_result(output: Any, cost: CostReport) -> bytes:
    """The run result of a succeeded item; `TypeError` if ``output`` is not plain data."""
    try:
        return msgpack.packb(
            {"output": output, "cost": cost.to_map()}, default=plain_default, use_bin_type=True
        )
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise TypeError(f"the pipeline's output cannot be stored ({e}); return {_PLAIN}") from None


def decode_result(data: bytes, run_id: str) -> tuple[Any, CostReport]:
    """The output and cost stored as ``data``; `CorruptEngineRecord` if it is
    not a bulk result."""
    what = f"result of bulk run {run_id!r}"
    try:
        body = _unpack(data)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from None
    if not isinstance(body, dict) or "output" not in body:
        raise CorruptEngineRecord(what, f"not a bulk result envelope: {body!r:.200}")
    try:
        cost = CostReport.from_map(body.get("cost", {}))
    except InvalidArgument as e:
        raise CorruptEngineRecord(what, str(e)) from None
    return body["output"], cost
