"""ULID ids: 26 Crockford base-32 characters, sortable by time, monotonic.

`IdGenerator` makes ids that strictly increase even when the clock does not
advance (a frozen `MockClock`) or steps back: within one millisecond, or
behind the last id, the random part of the last id is incremented.
"""

from __future__ import annotations

import base64
import os
import re

from durable.errors import InvalidId
from durable.store.clock import Clock

__all__ = ["IdGenerator", "validate_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_RAND_MAX = (1 << 80) - 1


#: RFC 4648 base-32 digits -> Crockford's, for `_encode`.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())


def _encode(value: int) -> str:
    """``value`` (< 2**130) as 26 Crockford base-32 digits, most significant first."""
    # 20 bytes are 32 base-32 digits; the last 26 hold the low 130 bits.
    digits = base64.b32encode(value.to_bytes(20, "big"))[6:]
    return digits.translate(_TO_CROCKFORD).decode()


class IdGenerator:
    """Monotonic ULID text ids with timestamps from ``clock``."""

    __slots__ = ("_clock", "_last_ms", "_last_rand")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last_ms = -1
        self._last_rand = 0

    def next(self) -> str:
        """A new id, greater than every id this generator made before."""
        ms = self._clock.now_ms()
        if ms <= self._last_ms:
            ms = self._last_ms
            rand = self._last_rand + 1
            if rand > _RAND_MAX:  # 2**80 ids in one millisecond: borrow the next one
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big") >> 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        self._last_ms, self._last_rand = ms, rand
        return _encode((ms << 80) | rand)


#: Ids found valid lately: one run's id is checked at every layer it crosses
#: (a dozen times from start to result), a set lookup instead of a match.
_VALID: set[str] = set()
#: `_VALID` is emptied once it holds this many ids.
_VALID_MAX = 4096


def validate_id(value: str, what: str = "id") -> str:
    """Check ``value`` is 1-128 bytes of ``[A-Za-z0-9_-]``; raise `InvalidId` if not."""
    if type(value) is str and value in _VALID:
        return value
    if not isinstance(value, str):
        raise InvalidId(repr(value), f"{what} must be a str, got {type(value).__name__}")
    if not _ID_RE.fullmatch(value):
        reason = (
            "must be 1 to 128 characters"
            if not 1 <= len(value) <= 128
            else "may contain only letters, digits, '_' and '-'"
        )
        raise InvalidId(value, f"{what} {reason}")
    if type(value) is str:
        if len(_VALID) >= _VALID_MAX:
            _VALID.clear()
        _VALID.add(value)
    return value
