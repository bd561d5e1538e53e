"""The invocation of a workflow run: its name and arguments, as stored.

Every delivery of a workflow run carries the same payload, the encoded
`Invocation`: a MessagePack map ``{"v": 1, "name": ..., "args": [...],
"kwargs": {...}}`` where each argument is encoded on its own by the
engine's codec (so an error names the argument), and ``"inc": n`` in the
payload of the n-th incarnation of a run that continued as new
(`durable.decorators.continuation`; absent: 0, the run as started). The workflow's name is
its durable identity: the process that runs the run finds the function by
it (`durable.decorators.registry`).

Arguments are checked against the function's signature (`bind_arguments`)
where a run is started or a job submitted, so a missing or unexpected
argument raises `ArgumentMismatch` (a `TypeError`) at that call, before
anything is written; a delivery checks the stored arguments again
(`Invocation.check_fits`) before it decodes them, since the code may have
changed after the run was started.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from durable.decorators.codec import Codec
from durable.decorators.typed import from_plain, parameter_hints
from durable.errors import ArgumentMismatch, CodecError

__all__ = [
    "INVOCATION_VERSION",
    "Invocation",
    "bind_arguments",
    "decode_invocation",
    "encode_invocation",
    "signature_of",
]

#: The format version of an encoded invocation.
INVOCATION_VERSION = 1


@functools.lru_cache(maxsize=1024)
def signature_of(fn: Callable[..., Any]) -> inspect.Signature:
    """The signature of ``fn`` (computed once per function)."""
    return inspect.signature(fn)


def bind_arguments(
    fn: Callable[..., Any],
    kind: str,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    run_id: str | None = None,
) -> inspect.BoundArguments:
    """``args`` and ``kwargs`` bound to the signature of ``fn``, the function of
    ``kind`` (``"workflow"`` or ``"job"``) ``name``; `ArgumentMismatch`
    naming it and the argument when they do not fit (``run_id``: the run
    whose stored arguments these are)."""
    signature = signature_of(fn)
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as e:
        raise ArgumentMismatch(kind, name, f"{name}{signature}", str(e), run_id) from None


@dataclass(frozen=True, slots=True)
class Invocation:
    """A workflow's name and its arguments, each still encoded by the codec."""

    name: str
    args: tuple[bytes, ...]
    kwargs: Mapping[str, bytes]
    #: 0 for the run as started; n after its n-th ``durable.continue_as_new``.
    incarnation: int = 0

    def check_fits(self, fn: Callable[..., Any], run_id: str, kind: str = "workflow") -> None:
        """`ArgumentMismatch` naming run ``run_id`` and the argument unless the
        stored arguments fit the signature of ``fn`` (checked before they are
        decoded: only their number and names matter)."""
        bind_arguments(
            fn, kind, self.name, [None] * len(self.args), dict.fromkeys(self.kwargs), run_id
        )

    def decode_args(
        self, codec: Codec, run_id: str, fn: Callable[..., Any] | None = None
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments, decoded; with ``fn``, each validated into the
        annotation of its parameter (`durable.decorators.typed`:
        `TypeMismatch` naming the run and the argument)."""
        args = [
            codec.loads(a, what=f"argument {i} of run {run_id!r} ({self.name})")
            for i, a in enumerate(self.args)
        ]
        kwargs = {
            k: codec.loads(v, what=f"argument {k!r} of run {run_id!r} ({self.name})")
            for k, v in self.kwargs.items()
        }
        if fn is None:
            return args, kwargs
        hints = parameter_hints(fn)
        if not hints:
            return args, kwargs
        parameters = list(signature_of(fn).parameters.values())
        for i, value in enumerate(args):
            p = _parameter_at(parameters, i)
            if p is not None and p.name in hints:
                what = f"argument {p.name!r} of run {run_id!r} ({self.name})"
                args[i] = from_plain(value, hints[p.name], what)
        by_name = {p.name: p for p in parameters}
        var_kw = next((p for p in parameters if p.kind is p.VAR_KEYWORD), None)
        for k, value in kwargs.items():
            q = by_name.get(k)
            p = q if q is not None and q.kind is not q.VAR_POSITIONAL else var_kw
            if p is not None and p.name in hints:
                what = f"argument {k!r} of run {run_id!r} ({self.name})"
                kwargs[k] = from_plain(value, hints[p.name], what)
        return args, kwargs


def _parameter_at(parameters: list[inspect.Parameter], index: int) -> inspect.Parameter | None:
    """The parameter that positional argument ``index`` binds to."""
    for i, p in enumerate(parameters):
        if p.kind is p.VAR_POSITIONAL:
            return p
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return None
        if i == index:
            return p
    return None


def encode_invocation(
    codec: Codec,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    kind: str = "workflow",
    incarnation: int = 0,
) -> bytes:
    """The payload of a run of workflow ``name`` (or job: ``kind`` names which,
    for error messages) called with ``args`` and ``kwargs``; ``incarnation``:
    of a run continued as new that many times."""
    m = {
        "v": INVOCATION_VERSION,
        "name": name,
        "args": [codec.dumps(a, what=f"argument {i} of {kind} {name}") for i, a in enumerate(args)],
        "kwargs": {
            k: codec.dumps(v, what=f"argument {k!r} of {kind} {name}") for k, v in kwargs.items()
        },
    }
    if incarnation:
        m["inc"] = incarnation
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def decode_invocation(payload: bytes, run_id: str) -> Invocation:
    """`encode_invocation` reversed; `CodecError` naming the run if it does not decode."""
    try:
        m = msgpack.unpackb(payload, raw=False)
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not a map")
        version = m.get("v")
        if not isinstance(version, int) or version > INVOCATION_VERSION:
            raise ValueError(f"format version {version!r}; this durable reads {INVOCATION_VERSION}")
        name, args, kwargs = m["name"], m.get("args", []), m.get("kwargs", {})
        incarnation = m.get("inc", 0)
        if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("name, args or kwargs has the wrong type")
        if not isinstance(incarnation, int) or isinstance(incarnation, bool) or incarnation < 0:
            raise ValueError(f"bad incarnation {incarnation!r}")
        if not all(isinstance(a, bytes) for a in args) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in kwargs.items()
        ):
            raise ValueError("an argument is not encoded bytes")
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
        raise CodecError(
            f"run {run_id!r} does not carry a workflow invocation ({e}); it was not "
            "started by @workflow, or by a newer durable"
        ) from None
    return Invocation(name, tuple(args), kwargs, incarnation)
