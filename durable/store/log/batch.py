"""A write batch: the puts and deletes of one transaction."""

from __future__ import annotations

__all__ = ["WriteBatch"]


class WriteBatch:
    """Puts and deletes applied together, in order, or not at all.

    Keys and values are `bytes`. A later operation on the same key wins.
    ``release`` names blob objects that may be deleted once the batch is
    durable (the values that referenced them are gone).
    """

    __slots__ = ("ops", "released")

    def __init__(self) -> None:
        self.ops: list[bytes | None] = []
        self.released: list[str] = []

    def put(self, key: bytes, value: bytes) -> WriteBatch:
        """Set ``key`` to ``value``."""
        self.ops.append(key)
        self.ops.append(value)
        return self

    def delete(self, key: bytes) -> WriteBatch:
        """Remove ``key`` (absent keys are fine)."""
        self.ops.append(key)
        self.ops.append(None)
        return self

    def release(self, blob: str) -> WriteBatch:
        """Delete blob object ``blob`` after this batch is durable."""
        self.released.append(blob)
        return self

    def __len__(self) -> int:
        return len(self.ops) // 2

    def __bool__(self) -> bool:
        return bool(self.ops) or bool(self.released)
