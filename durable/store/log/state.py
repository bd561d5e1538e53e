"""The in-memory ordered map that holds a store's state."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sortedcontainers import SortedDict

__all__ = ["State", "prefix_end"]


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``.

    None when no such key exists (``prefix`` is empty or all ``0xff``).
    """
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


class State:
    """An ordered ``bytes -> bytes`` map with range scans.

    Reads never block and never do I/O; the log keeps this map equal to the
    newest checkpoint plus every log object after it.
    """

    __slots__ = ("_map",)

    def __init__(self, items: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self._map: SortedDict[bytes, bytes] = SortedDict(items)

    def get(self, key: bytes) -> bytes | None:
        """The value at ``key``, or None."""
        return self._map.get(key)

    def __contains__(self, key: bytes) -> bool:
        return key in self._map

    def __len__(self) -> int:
        return len(self._map)

    def scan(
        self,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        inclusive: tuple[bool, bool] = (True, False),
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``start <= key < stop`` (bounds per ``inclusive``), in key order.

        Iterating while the map changes is not allowed: collect first.
        """
        m = self._map
        for k in m.irange(start, stop, inclusive=inclusive, reverse=reverse):
            yield k, m[k]

    def scan_prefix(self, prefix: bytes, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with ``prefix``, in key order."""
        return self.scan(prefix, prefix_end(prefix), reverse=reverse)

    def count(self, prefix: bytes) -> int:
        """How many keys start with ``prefix``: two bisections, no scan."""
        m = self._map
        end = prefix_end(prefix)
        stop = len(m) if end is None else m.bisect_left(end)
        return stop - m.bisect_left(prefix)

    def first(self, prefix: bytes) -> tuple[bytes, bytes] | None:
        """The first item under ``prefix``, or None."""
        for item in self.scan_prefix(prefix):
            return item
        return None

    def apply(self, ops: Sequence[bytes | None]) -> None:
        """Apply flattened ``[key, value-or-None, ...]`` operations in order."""
        m = self._map
        it = iter(ops)
        for k, v in zip(it, it, strict=True):
            assert k is not None
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v

    def snapshot(self) -> tuple[list[bytes], list[bytes]]:
        """Copies of all keys and values, for a checkpoint."""
        return list(self._map.keys()), list(self._map.values())
