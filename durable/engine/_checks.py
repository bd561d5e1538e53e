"""Argument checks shared by the engine's value types; each raises `InvalidArgument`."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping

from durable.errors import InvalidArgument

#: The largest u32 (queue priorities and attempt limits).
U32_MAX = 2**32 - 1
#: The largest u64 (epoch milliseconds).
U64_MAX = 2**64 - 1


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` if it is an int (not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{name} must be between {lo} and {hi}, got {value!r}")
    return value


def check_seconds(name: str, value: object, *, positive: bool = False) -> float:
    """``value`` (a number of seconds or a `datetime.timedelta`) as float seconds.

    Finite and non-negative, or strictly positive when ``positive``.
    """
    seconds: float
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds or a timedelta, got {value!r}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        need = "positive" if positive else "non-negative"
        raise InvalidArgument(f"{name} must be a finite {need} duration, got {value!r}")
    return seconds


def check_bytes(name: str, value: object) -> bytes:
    """``value`` as `bytes` (bytearray and memoryview are copied)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidArgument(f"{name} must be bytes, got {type(value).__name__}: {value!r:.80}")


def check_str(name: str, value: object, *, non_empty: bool = False) -> str:
    """``value`` if it is a str encodable as UTF-8 (and not empty when ``non_empty``)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str, got {type(value).__name__}: {value!r:.80}")
    if non_empty and not value:
        raise InvalidArgument(f"{name} must not be empty, got {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} is not valid UTF-8 (a lone surrogate): {value!r}") from None
    return value


def check_optional_str(name: str, value: object) -> str | None:
    """``value`` if it is None or a valid str."""
    return None if value is None else check_str(name, value)


def check_headers(name: str, value: object) -> Mapping[str, str]:
    """A copy of ``value``, a mapping of str to str (a plain dict: picklable)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{name} must be a mapping of str to str, got {value!r:.80}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidArgument(f"{name} must map str to str, got {k!r}: {v!r}")
        check_str(f"{name} key", k)
        check_str(f"{name}[{k!r}]", v)
    return dict(value)
