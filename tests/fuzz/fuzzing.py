"""The fuzz harness: corrupted inputs for decoders, and the property they must keep.

A decoder of stored bytes, given anything, returns a well-typed value or
raises its typed error (a `DurableError`); it never raises anything else,
never hangs and never runs code it read. Inputs come from four sources,
mutations of valid encodings first (they get past the outer checks, where
random bytes stop at the first byte):

- random bytes;
- valid encodings mutated byte by byte: bit flips, overwritten, inserted,
  deleted and duplicated runs, truncations (`mutate_bytes`);
- valid encodings of one decoder spliced with each other;
- structure-aware mutations (`mutate_tree`): the MessagePack tree of a
  valid encoding with values replaced by values of other types, keys
  removed, added or retyped, then packed again (and framed again with a
  correct checksum where the format has one), so type confusion reaches
  the field checks instead of stopping at the framing.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import pickle
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgpack
from hypothesis import settings
from hypothesis import strategies as st

from durable.errors import DurableError

__all__ = [
    "EVIL_PICKLE",
    "FUZZ",
    "TRIPPED",
    "conforms",
    "corrupted",
    "decodes_or_raises",
    "msgpack_values",
    "mutate_bytes",
    "mutate_tree",
    "pack",
    "tripwire",
]

#: The settings of every fuzz test (profiles in this folder's conftest).
FUZZ = settings(settings.get_profile(os.environ.get("DURABLE_FUZZ_PROFILE", "durable-fuzz")))

# ------------------------------------------------------------ evil pickle

#: What `tripwire` recorded: a pickle that runs code on load was unpickled.
TRIPPED: list[str] = []


def tripwire(tag: str) -> str:
    """Called by unpickling `EVIL_PICKLE`: the side effect a decoder must never cause."""
    TRIPPED.append(tag)
    return tag


class _Evil:
    def __reduce__(self) -> tuple[Callable[[str], str], tuple[str]]:
        return tripwire, ("a pickle ran code on load",)


#: A pickle whose loading calls `tripwire` (a ``__reduce__`` with a side effect).
EVIL_PICKLE = pickle.dumps(_Evil(), protocol=5)

# ---------------------------------------------------------------- values

_INT = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**31, 2**32, 2**53, 2**63 - 1, 2**64 - 1, -(2**31), -(2**63)]),
    st.integers(-(2**63), 2**64 - 1),
)
#: Values at the edges of each type: what decoders coerce or compare badly.
_NASTY = st.sampled_from(
    [
        None, True, False, 0, -1, 2**64 - 1, -(2**63), 0.5, -0.0,
        float("inf"), float("-inf"), float("nan"),
        "", "0", "x" * 40, "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
        b"", b"0", b"\xff" * 40, [], [[]], {}, {"": None},
    ]
)  # fmt: skip
_LEAVES = st.one_of(
    _NASTY,
    _NASTY,
    st.booleans(),
    _INT,
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=8),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=12)),
    st.builds(msgpack.Timestamp, st.integers(0, 2**34), st.integers(0, 10**9 - 1)),
)
_KEYS = st.one_of(st.text(max_size=6), st.binary(max_size=4), _INT, st.none(), st.booleans())


def msgpack_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Anything MessagePack encodes: scalars of every type, ext types, lists,
    maps with keys of any scalar type."""
    return st.recursive(
        _LEAVES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
        max_leaves=max_leaves,
    )


def pack(value: Any) -> bytes:
    """``value`` as MessagePack (bytes as ``bin``)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


# ------------------------------------------------------------- mutations

_BYTE_OPS = ("flip", "set", "insert", "delete", "duplicate", "truncate", "extend")


@st.composite
def mutate_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one to four byte-level mutations."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(_BYTE_OPS))
        at = draw(st.integers(0, len(out)))
        if op == "flip" and out:
            i = min(at, len(out) - 1)
            out[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and out:
            i = min(at, len(out) - 1)
            out[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xC1, 0xD9, 0xDD, 0xDF, 0xFF]))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del out[at : at + draw(st.integers(1, 8))]
        elif op == "duplicate":
            out[at:at] = out[at : at + draw(st.integers(1, 16))]
        elif op == "truncate":
            del out[at:]
        elif op == "extend":
            out += draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _node(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _replace_at(value: Any, path: tuple[Any, ...], change: Callable[[Any], Any]) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced by ``change(node)``."""
    if not path:
        return change(value)
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        copy[head] = _replace_at(value[head], rest, change)
        return copy
    copy_list = list(value)
    copy_list[head] = _replace_at(value[head], rest, change)
    return copy_list


_TREE_OPS = ("replace", "replace", "drop", "add", "rekey", "wrap")
_FIELD_OPS = ("field", "field", "field")  # with names: set a known field of a map


@st.composite
def mutate_tree(draw: st.DrawFn, tree: Any, names: tuple[str, ...] = ()) -> Any:
    """``tree`` (a decoded MessagePack value) with one to three structural
    mutations: a node replaced by a value of any type, a map entry or list
    item dropped, an entry added, a key retyped, a node wrapped in a list.

    ``names`` are field names the format knows (optional fields that valid
    encodings omit, say): added and renamed keys are often one of them.
    """
    keys = st.sampled_from(names) | _KEYS if names else _KEYS
    ops = _TREE_OPS + _FIELD_OPS if names else _TREE_OPS
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(tree))
        op = draw(st.sampled_from(ops))
        if op == "field":
            maps = [p for p in paths if isinstance(_node(tree, p), dict)]
            if maps:
                path, name = draw(st.sampled_from(maps)), draw(st.sampled_from(names))
                new = draw(msgpack_values(4))
                tree = _replace_at(tree, path, lambda node, n=name, v=new: {**node, n: v})
            continue
        path = draw(st.sampled_from(paths))
        if op == "replace":
            new = draw(msgpack_values(4))
            tree = _replace_at(tree, path, lambda _, new=new: new)
        elif op == "wrap":
            tree = _replace_at(tree, path, lambda node: [node])
        elif op == "drop":

            def drop(node: Any) -> Any:
                if isinstance(node, dict) and node:
                    key = draw(st.sampled_from(list(node)))
                    return {k: v for k, v in node.items() if k != key}
                if isinstance(node, list) and node:
                    i = draw(st.integers(0, len(node) - 1))
                    return node[:i] + node[i + 1 :]
                return node

            tree = _replace_at(tree, path, drop)
        elif op == "add":
            key, new = draw(keys), draw(msgpack_values(4))

            def add(node: Any, key: Any = key, new: Any = new) -> Any:
                if isinstance(node, dict):
                    return {**node, key: new}
                if isinstance(node, list):
                    return [*node, new]
                return node

            tree = _replace_at(tree, path, add)
        elif op == "rekey":
            key = draw(keys)

            def rekey(node: Any, key: Any = key) -> Any:
                if isinstance(node, dict) and node:
                    old = draw(st.sampled_from(list(node)))
                    return {(key if k == old else k): v for k, v in node.items()}
                return node

            tree = _replace_at(tree, path, rekey)
    return tree


def _decode_tree(data: bytes) -> tuple[Any, bool] | None:
    """``(tree, stream)``: the MessagePack value in ``data``, or the list of
    the values it concatenates (``stream``); None if it is not MessagePack."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True), False
    except msgpack.ExtraData:
        pass
    except Exception:
        return None
    try:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=True)
        unpacker.feed(data)
        return list(unpacker), True
    except Exception:
        return None


@st.composite
def corrupted(
    draw: st.DrawFn,
    valid: st.SearchStrategy[bytes],
    *,
    body: tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]] | None = None,
    names: tuple[str, ...] = (),
    max_random: int = 64,
) -> bytes:
    """Bytes for a decoder whose valid inputs ``valid`` draws.

    ``body``, for formats that wrap a MessagePack body (a frame with a
    checksum, a kind byte), is ``(unwrap, wrap)``: the structure-aware
    mutations change the body and wrap it again, so they get past the
    checksum. ``names``: the format's field names (see `mutate_tree`).
    """
    source = draw(st.sampled_from(["random", "bytes", "tree", "tree", "splice"]))
    if source == "random":
        return draw(st.binary(max_size=max_random))
    data = draw(valid)
    if source == "bytes":
        return draw(mutate_bytes(data))
    if source == "splice":
        other = draw(valid)
        cut, at = draw(st.integers(0, len(data))), draw(st.integers(0, len(other)))
        return data[:cut] + other[at:]
    unwrap, wrap = body if body is not None else (lambda b: b, lambda b: b)
    inner = unwrap(data)
    decoded = _decode_tree(inner)
    if decoded is None:  # not MessagePack (a key, a raw frame body): bytes then
        return draw(mutate_bytes(data))
    tree, stream = decoded
    tree = draw(mutate_tree(tree, names))
    try:
        packed = b"".join(map(pack, tree)) if stream and isinstance(tree, list) else pack(tree)
    except (TypeError, ValueError, OverflowError):  # a mutation msgpack cannot pack
        packed = inner
    return wrap(packed)


# ------------------------------------------------------------- property


def decodes_or_raises(
    decode: Callable[[], Any],
    errors: type[DurableError] | tuple[type[DurableError], ...],
    expect: Any = object,
) -> Any:
    """Run ``decode()``: it returns a value conforming to the type ``expect``
    (see `conforms`) or raises one of ``errors``; anything else fails the
    test. Returns the value, or None after an expected error."""
    try:
        value = decode()
    except errors:
        return None
    except BaseException as e:  # the property: nothing but the typed error
        raise AssertionError(f"decoder raised {type(e).__name__}: {e!r}") from e
    problem = conforms(value, expect)
    assert problem is None, f"decoded a badly typed value: {problem}"
    return value


def conforms(value: Any, hint: Any, where: str = "value") -> str | None:
    """Why ``value`` does not fit the type ``hint``, or None if it does.

    Dataclasses are checked field by field against their annotations (a bool
    passes for an int, as in Python); the supported hints are those of
    durable's records: classes, enums, unions, ``list``/``tuple``/``dict``/
    ``Mapping`` with their parameters, ``Any``.
    """
    if hint is Any or hint is object:
        return None
    if hint is None or hint is type(None):
        return None if value is None else f"{where} is {value!r}, expected None"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        problems = [conforms(value, h, where) for h in typing.get_args(hint)]
        return None if None in problems else " / ".join(p for p in problems if p)
    if origin is not None:
        return _conforms_generic(value, origin, typing.get_args(hint), where)
    if not isinstance(hint, type):
        return None  # a TypeVar or a forward reference: not checked
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return None
    if not isinstance(value, hint):
        return f"{where} is a {type(value).__name__} ({value!r:.80}), expected {hint.__name__}"
    if dataclasses.is_dataclass(hint) and not isinstance(value, enum.Enum):
        hints = typing.get_type_hints(hint)
        for f in dataclasses.fields(hint):
            problem = conforms(getattr(value, f.name), hints[f.name], f"{where}.{f.name}")
            if problem:
                return problem
    return None


def _conforms_generic(value: Any, origin: Any, args: tuple[Any, ...], where: str) -> str | None:
    if origin in (list, tuple) or origin is typing.Sequence:
        kind = tuple if origin is tuple else (list if origin is list else (list, tuple))
        if not isinstance(value, kind):
            return f"{where} is a {type(value).__name__}, expected a {origin.__name__}"
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                return f"{where} has {len(value)} items, expected {len(args)}"
            items = list(zip(value, args, strict=True))
        else:
            items = [(v, args[0] if args else Any) for v in value]
        for i, (v, h) in enumerate(items):
            problem = conforms(v, h, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if origin in (dict, Mapping) or (isinstance(origin, type) and issubclass(origin, Mapping)):
        if not isinstance(value, Mapping):
            return f"{where} is a {type(value).__name__}, expected a mapping"
        kh, vh = args if args else (Any, Any)
        for k, v in value.items():
            problem = conforms(k, kh, f"key of {where}") or conforms(v, vh, f"{where}[{k!r}]")
            if problem:
                return problem
        return None
    if isinstance(origin, type):
        return conforms(value, origin, where)
    return None
