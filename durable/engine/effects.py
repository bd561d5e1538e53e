"""Staged application KV effects: what a step (or a hook) commits with its settlement.

`EffectsHandle` validates every operation as it is staged: keys under
``workflow/`` are reserved for the runtime (`ReservedKey`), values are
capped at `MAX_KV_VALUE_SIZE` (`KvValueTooLarge`), and one key cannot be
both written and deleted (`ConflictingKvEffect`). Once the step has
returned the handle is sealed: later staging raises `EffectsSealed`.
"""

from __future__ import annotations

from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import ConflictingKvEffect, EffectsSealed, ReservedKey
from durable.store.keyspace import check_kv_value
from durable.store.queue import EnqueueOptions, SettlementEffects

__all__ = ["EffectsHandle", "TerminalEffects"]


def _key(key: bytes | str) -> bytes:
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes):
        raise TypeError(f"KV keys are bytes or str, got {type(key).__name__}")
    if key.startswith(RESERVED_KV_PREFIX):
        raise ReservedKey(key, RESERVED_KV_PREFIX)
    return key


class EffectsHandle:
    """KV writes and deletes staged during a step."""

    __slots__ = ("_deletes", "_puts", "_sealed")

    def __init__(self) -> None:
        self._puts: dict[bytes, bytes] = {}
        self._deletes: set[bytes] = set()
        self._sealed = False

    def put(self, key: bytes | str, value: bytes) -> None:
        """Stage ``key = value`` (write absolute values: a retry stages it again)."""
        self._check_open()
        k = _key(key)
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"KV values are bytes, got {type(value).__name__} for {k!r}")
        check_kv_value(k, bytes(value))
        if k in self._deletes:
            raise ConflictingKvEffect(k)
        self._puts[k] = bytes(value)

    def delete(self, key: bytes | str) -> None:
        """Stage the removal of ``key``."""
        self._check_open()
        k = _key(key)
        if k in self._puts:
            raise ConflictingKvEffect(k)
        self._deletes.add(k)

    def staged(self) -> tuple[dict[bytes, bytes], frozenset[bytes]]:
        """Copies of the staged writes and deletes."""
        return dict(self._puts), frozenset(self._deletes)

    def restore(self, puts: dict[bytes, bytes], deletes: frozenset[bytes]) -> None:
        """Stage writes and deletes recorded earlier (a replayed outcome's)."""
        self._check_open()
        self._puts.update(puts)
        self._deletes.update(deletes)

    def seal(self) -> None:
        """Refuse further staging (the step has returned)."""
        self._sealed = True

    def _check_open(self) -> None:
        if self._sealed:
            raise EffectsSealed()

    def apply_to(self, effects: SettlementEffects) -> SettlementEffects:
        """Add the staged operations to ``effects``."""
        for k, v in self._puts.items():
            effects.kv_put(k, v)
        for k in sorted(self._deletes):
            effects.kv_delete(k)
        return effects

    def __len__(self) -> int:
        return len(self._puts) + len(self._deletes)


class TerminalEffects(EffectsHandle):
    """What a terminal hook commits with the ack of its notification:
    KV writes and deletes, and follow-up jobs."""

    __slots__ = ("_enqueues",)

    def __init__(self) -> None:
        super().__init__()
        self._enqueues: list[tuple[str, bytes, EnqueueOptions | None]] = []

    def enqueue(self, queue: str, payload: bytes, options: EnqueueOptions | None = None) -> None:
        """Stage a follow-up job."""
        self._check_open()
        self._enqueues.append((queue, bytes(payload), options))

    def apply_to(self, effects: SettlementEffects) -> SettlementEffects:
        """Add the staged operations and jobs to ``effects``."""
        super().apply_to(effects)
        for queue, payload, options in self._enqueues:
            effects.enqueue(queue, payload, options)
        return effects
