"""Typed values: dataclasses and Pydantic models through every codec.

A workflow, step or job may take and return dataclasses, Pydantic models,
``NamedTuple``\\ s and enums (nested, in lists, dicts, ``Optional``):

- with ``codec="auto"`` they are pickled and come back as themselves;
- with ``codec="msgpack"`` the codec stores them as plain data
  (`to_plain`: a dataclass or a named tuple as its fields, a model as its
  ``model_dump(mode="json")``, an enum as its value), and each is *validated
  back into its type* where it is read (`from_plain`), from the annotation
  that says what it is: a workflow's or job's arguments from its parameter
  annotations, a step's, workflow's or job's result from its return
  annotation, a signal from ``wait_for_signal(key, type=T)`` and a
  published value from ``handle.get(key, type=T)``.

A value that does not fit raises `TypeMismatch` naming it (the run, the
step, the key) and the type. Annotations only convert: a value whose
annotation holds no dataclass, model, named tuple or enum is passed as it
is. ``type=`` also checks: ``wait_for_signal("n", type=int)`` raises
`TypeMismatch` for a str.

Pydantic is optional: it is never imported here; a model is recognised
only when ``pydantic`` is already imported (a model exists).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import sys
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from durable.errors import TypeMismatch

__all__ = ["from_plain", "hints_of", "parameter_hints", "return_hint", "to_plain"]

_MISSING = object()
_hints: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Any]] = weakref.WeakKeyDictionary()


def _model_base() -> type | None:
    """``pydantic.BaseModel`` if pydantic is imported, else None (never imports it)."""
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None)
    return base if isinstance(base, type) else None


def _is_model_class(t: object) -> bool:
    base = _model_base()
    return base is not None and isinstance(t, type) and issubclass(t, base)


def _is_named_tuple_class(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")


# ------------------------------------------------------------------ encode


#: Levels `to_plain` walks down (deeper values, and cycles, are left as they are).
_MAX_DEPTH = 256


def to_plain(value: Any, _depth: int = 0) -> Any:
    """``value`` with every dataclass, model, named tuple and enum inside it
    replaced by plain data (see the module docstring); other values as
    they are."""
    if _depth > _MAX_DEPTH:  # a cycle: the codec refuses it, naming it
        return value
    d = _depth + 1
    t = type(value)
    if t is list:
        return [to_plain(v, d) for v in value]
    if t is tuple:
        return tuple(to_plain(v, d) for v in value)
    if t is dict:
        return {to_plain(k, d): to_plain(v, d) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name), d) for f in dataclasses.fields(value)}
    base = _model_base()
    if base is not None and isinstance(value, base):
        dumped: Any = value.model_dump(mode="json")  # type: ignore[attr-defined]
        return dumped
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return tuple(to_plain(v, d) for v in value)
    if isinstance(value, enum.Enum):
        return to_plain(value.value, d)
    return value


# ------------------------------------------------------------------ decode


def hints_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The resolved annotations of ``fn`` (``typing.get_type_hints``; empty
    when they cannot be resolved, e.g. a name defined later in a function)."""
    try:
        return _hints[fn]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an unresolvable forward reference: no conversion
        hints = {}
    with contextlib.suppress(TypeError):  # not weakly referenceable: not kept
        _hints[fn] = hints
    return hints


def return_hint(fn: Callable[..., Any]) -> Any:
    """The return annotation of ``fn`` (`typing.Any` when it has none)."""
    return hints_of(fn).get("return", Any)


def parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The annotations of ``fn``'s parameters, by name."""
    return {k: v for k, v in hints_of(fn).items() if k != "return"}


def _name(t: Any) -> str:
    if isinstance(t, type):
        return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    return repr(t).replace("typing.", "")


def _needs(t: Any) -> bool:
    """Whether an annotation holds a type that `from_plain` converts."""
    if typing.is_typeddict(t):
        try:
            return any(_needs(h) for h in typing.get_type_hints(t).values())
        except Exception:
            return False
    if isinstance(t, type):
        return (
            dataclasses.is_dataclass(t)
            or _is_model_class(t)
            or _is_named_tuple_class(t)
            or issubclass(t, enum.Enum)
        )
    return any(_needs(a) for a in typing.get_args(t) if a is not Ellipsis)


_CONVERTS: dict[Any, bool] = {}


def converts(annotation: Any) -> bool:
    """Whether `from_plain` converts a value of ``annotation`` (without
    ``strict``), remembered per annotation."""
    try:
        found = _CONVERTS.get(annotation)
    except TypeError:  # an unhashable annotation: not remembered
        return _needs(annotation)
    if found is None:
        found = _CONVERTS[annotation] = _needs(annotation)
    return found


class _Mismatch(Exception):
    """Internal: where inside the value, and why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def from_plain(value: Any, annotation: Any, what: str, *, strict: bool = False) -> Any:
    """``value`` validated into ``annotation``: dataclasses, models, named
    tuples and enums built from their plain form (and checked), containers
    walked; `TypeMismatch` naming ``what`` when it does not fit. ``strict``
    also checks plain types (``int``, ``str``, ...); without it a value
    whose annotation needs no conversion is returned untouched."""
    if annotation is Any:
        return value
    if not strict and not converts(annotation):
        return value
    try:
        return _convert(value, annotation, "value", strict)
    except _Mismatch as e:
        raise TypeMismatch(what, _name(annotation), e.detail) from None


def _fail(where: str, t: Any, value: Any, why: str = "") -> _Mismatch:
    got = f"a {type(value).__qualname__}"
    return _Mismatch(f"{where} is {got}, not a {_name(t)}" + (f" ({why})" if why else ""))


def _convert(value: Any, t: Any, where: str, strict: bool) -> Any:
    if t is Any or isinstance(t, typing.TypeVar):
        return value
    if t is None or t is type(None):
        if value is None:
            return None
        raise _fail(where, type(None), value)
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        for arm in arms:  # an instance of an arm as it is, first
            if isinstance(arm, type) and isinstance(value, arm):
                return _convert(value, arm, where, strict)
        for arm in arms:
            try:
                return _convert(value, arm, where, strict)
            except _Mismatch:
                continue
        raise _fail(where, t, value)
    if origin is typing.Literal:
        if value in args:
            return value
        raise _fail(where, t, value, f"{value!r} is not one of {list(args)!r}")
    if typing.is_typeddict(t):
        if not isinstance(value, dict):
            raise _fail(where, t, value)
        hints = typing.get_type_hints(t)
        return {
            k: _convert(v, hints[k], f"{where}[{k!r}]", strict) if k in hints else v
            for k, v in value.items()
        }
    if origin is not None:
        return _container(value, t, origin, args, where, strict)
    if not isinstance(t, type):  # NewType, a string that did not resolve...
        return value
    try:
        instance = isinstance(value, t)
    except TypeError:  # a protocol that is not runtime-checkable...
        return value
    if instance and not _is_named_tuple_class(t):
        return value
    if _is_model_class(t):
        return _model(value, t, where)
    if dataclasses.is_dataclass(t):
        return _dataclass(value, t, where, strict)
    if _is_named_tuple_class(t):
        return _named_tuple(value, t, where, strict)
    if issubclass(t, enum.Enum):
        try:
            return t(value)
        except ValueError:
            raise _fail(where, t, value, f"{value!r} is not one of its values") from None
    if not strict:
        return value
    if t is float and type(value) is int:
        return value
    if t is bytes and type(value) is bytearray:
        return value
    raise _fail(where, t, value)


def _container(
    value: Any, t: Any, origin: Any, args: tuple[Any, ...], where: str, strict: bool
) -> Any:
    if origin in (list, set, frozenset) or origin in _SEQUENCES:
        if not isinstance(value, list | tuple | set | frozenset):
            raise _fail(where, t, value)
        item = args[0] if args else Any
        items = [_convert(v, item, f"{where}[{i}]", strict) for i, v in enumerate(value)]
        if origin in (set, frozenset):
            return origin(items)
        return items if type(value) is list or origin is list else type(value)(items)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _fail(where, t, value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{where}[{i}]", strict) for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise _fail(where, t, value, f"{len(value)} items, not {len(args)}")
        if not args:
            return tuple(value)
        pairs = zip(args, value, strict=True)
        return tuple(_convert(v, a, f"{where}[{i}]", strict) for i, (a, v) in enumerate(pairs))
    if origin is dict or origin in _MAPPINGS:
        if not isinstance(value, Mapping):
            raise _fail(where, t, value)
        kt, vt = args if len(args) == 2 else (Any, Any)
        return {
            _convert(k, kt, f"{where} key {k!r}", strict): _convert(
                v, vt, f"{where}[{k!r}]", strict
            )
            for k, v in value.items()
        }
    if origin is typing.Annotated:
        return _convert(value, args[0], where, strict)
    return value  # another generic (a Callable, a user generic): as it is


_SEQUENCES = {
    typing.get_origin(typing.Sequence[int]),
    typing.get_origin(typing.MutableSequence[int]),
    typing.get_origin(typing.Iterable[int]),
    typing.get_origin(typing.Collection[int]),
    typing.get_origin(typing.AbstractSet[int]),
}
_MAPPINGS = {
    typing.get_origin(typing.Mapping[int, int]),
    typing.get_origin(typing.MutableMapping[int, int]),
}


def _model(value: Any, t: type, where: str) -> Any:
    try:
        return t.model_validate(value)  # type: ignore[attr-defined]
    except Exception as e:  # pydantic.ValidationError, without importing it
        raise _fail(where, t, value, " ".join(str(e).split())) from None


def _dataclass(value: Any, t: type, where: str, strict: bool) -> Any:
    if not isinstance(value, Mapping):
        raise _fail(where, t, value)
    try:
        hints = typing.get_type_hints(t)
    except Exception:
        hints = {}
    fields = {f.name: f for f in dataclasses.fields(t) if f.init}
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise _fail(where, t, value, f"no field {unknown[0]!r}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        raw = value.get(name, _MISSING)
        if raw is _MISSING:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _fail(where, t, value, f"field {name!r} is missing")
            continue
        kwargs[name] = _convert(raw, hints.get(name, Any), f"{where}.{name}", strict)
    try:
        return t(**kwargs)
    except Exception as e:  # its __post_init__ refused it
        raise _fail(where, t, value, f"{type(e).__name__}: {e}") from None


def _named_tuple(value: Any, t: type, where: str, strict: bool) -> Any:
    if not isinstance(value, list | tuple):
        raise _fail(where, t, value)
    try:
        hints = typing.get_type_hints(t)
    except Exception:
        hints = {}
    names: tuple[str, ...] = t._fields  # type: ignore[attr-defined]
    if len(value) > len(names):
        raise _fail(where, t, value, f"{len(value)} items, not {len(names)}")
    items = [
        _convert(v, hints.get(n, Any), f"{where}.{n}", strict)
        for n, v in zip(names, value, strict=False)
    ]
    try:
        return t(*items)
    except Exception as e:
        raise _fail(where, t, value, f"{type(e).__name__}: {e}") from None
