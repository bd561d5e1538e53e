"""The decorators' codec: how arguments, results and exceptions are stored.

Every value is encoded once, into a *frame*: a format version byte, a kind
byte, then the payload.

- ``m``: MessagePack, for *plain data*: None, bool, int (64-bit: from
  ``-2**63`` to ``2**64 - 1``), float, str, bytes, list, tuple (kept a
  tuple: an ext type) and dict whose keys are plain and hashable (str, int,
  ...), nested up to `MAX_DEPTH` levels. Types are checked exactly: a
  subclass of a plain type (an enum, a named tuple, an ``OrderedDict``) is
  not plain, nor is a ``bytearray`` or ``memoryview`` (they would come back
  as ``bytes``, so a replay would see another type than the first run).
  The same value always encodes to the same bytes (nothing is sorted: dicts
  keep their order).
- ``p``: a cloudpickle of any other value, unsigned.
- ``s``: the same, signed: an HMAC-SHA256 (32 bytes, computed with the
  signing key over the frame header and the pickle) before the pickle.
- ``e``: an exception (`Codec.dumps_error`): a MessagePack map of its type,
  module, message, formatted traceback and, when it pickles, a nested
  ``p``/``s`` frame of the exception itself.

Modes. ``"auto"`` pickles what is not plain; ``"msgpack"`` stores
dataclasses, Pydantic models, named tuples and enums as plain data
(`durable.decorators.typed`: read back into their type from the
annotations) and refuses any other value with `CodecError` when it is
encoded (naming the value, the type and where it sits inside the value),
and never unpickles.

Signing. With a signing key every pickle is signed, and `Codec.loads`
refuses an unsigned or tampered pickle with `UntrustedPayload` before
unpickling anything (the signature is compared in constant time). A list
of keys rotates them: the first signs, each verifies. A key is only ever
shown as its `key_fingerprint`, which a store records
(`durable.decorators.codec_record`). Without
a key pickles are written unsigned and unsigned ones are read, with one
warning per process; a *signed* pickle is refused, since it cannot be
verified. `Codec.loads_error` never raises for a refused pickle: it returns
`WorkflowFailed` with the stored type, message and traceback instead.
"""

from __future__ import annotations

import copyreg
import hashlib
import hmac
import io
import reprlib
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, is_dataclass
from enum import Enum
from types import TracebackType
from typing import Any, ClassVar, Literal

import cloudpickle  # type: ignore[import-untyped]
import msgpack

from durable._logging import get_logger
from durable.decorators.typed import to_plain
from durable.errors import CodecError, InvalidArgument, UntrustedPayload, WorkflowFailed

__all__ = ["FORMAT_VERSION", "MAX_DEPTH", "Codec", "key_fingerprint"]

log = get_logger("durable.decorators.codec")

#: The format version written as the first byte of every frame.
FORMAT_VERSION = 1
#: The deepest nesting of containers encoded as MessagePack; deeper values
#: (and containers that hold themselves) are not plain.
MAX_DEPTH = 256

_MSGPACK = ord("m")
_PICKLE = ord("p")
_SIGNED = ord("s")
_ERROR = ord("e")
_KIND_NAMES = {_MSGPACK: "MessagePack", _PICKLE: "pickle", _SIGNED: "signed pickle"}
_HEADER_SIZE = 2
_MAC_SIZE = 32
_FINGERPRINT_LABEL = b"durable: the fingerprint of a signing key, v1"
_PICKLE_PROTOCOL = 5
_EXT_TUPLE = 1
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_SCALARS: frozenset[type] = frozenset({type(None), bool, float, str, bytes})
_STR_FREE_SCALARS = _SCALARS - {str}
_CONTAINERS: frozenset[type] = frozenset({list, tuple, dict})
#: Caps that keep a stored exception under the KV value limit.
_MAX_MESSAGE = 8 * 1024
_MAX_TRACEBACK = 32 * 1024
_MAX_ERROR_PICKLE = 128 * 1024
_PLAIN_TYPES = "None, bool, int, float, str, bytes, list, tuple, dict"

_unsigned_warned = False


def _warn_unsigned(action: str, what: str) -> None:
    """Log, once per process, that a pickle was handled without a signing key
    (what it means and the two ways out; docs/codec.md, "Signing")."""
    global _unsigned_warned
    if _unsigned_warned:
        return
    _unsigned_warned = True
    log.warning(
        "unsigned pickle",
        action=action,
        what=what,
        hint="without a signing key, values that are not plain data (and exceptions) "
        "are pickled and read back unverified, so whoever can write the store can run "
        "code here; pass Engine(signing_key=...) to sign and verify pickles, or "
        "Engine(codec='msgpack') to store plain data only. Logged once per process",
    )


# ---------------------------------------------------------------- plain data


@dataclass(frozen=True)
class _Problem:
    """Why a value is not plain, and where inside it."""

    detail: str
    path: tuple[object, ...] = ()
    in_key: bool = False

    def within(self, step: object) -> _Problem:
        return _Problem(self.detail, (step, *self.path), self.in_key)

    def describe(self) -> str:
        where = _where(self.path)
        if self.in_key:
            at = f"the dict at {where}" if self.path else "the value (a dict)"
            return f"a key of {at} is {self.detail}"
        if not self.path:
            return f"the value is {self.detail}"
        return f"{where} is {self.detail}"


def _where(path: tuple[object, ...]) -> str:
    """``value['items'][3]``: a place inside a value, for messages."""
    return "value" + "".join(f"[{reprlib.repr(step)}]" for step in path)


def _type_name(t: type) -> str:
    if t.__module__ == "builtins":
        return t.__qualname__
    return f"{t.__module__}.{t.__qualname__}"


def _hint(value: object) -> str:
    if isinstance(value, bytearray | memoryview):
        return "convert it with bytes(...)"
    if isinstance(value, set | frozenset):
        return "pass a list or a tuple"
    if isinstance(value, Enum):
        return "pass its .value"
    for base in (str, int, float, bytes, list, tuple, dict):
        if isinstance(value, base):
            return f"convert it to a plain {base.__name__}"
    if is_dataclass(value):
        return "pass dataclasses.asdict(...) of it"
    if hasattr(value, "model_dump"):
        return "pass its .model_dump()"
    return ""


def _not_plain(value: object) -> _Problem:
    hint = _hint(value)
    return _Problem(f"a {_type_name(type(value))}" + (f" ({hint})" if hint else ""))


def _find_problem(value: Any, depth: int, check_text: bool) -> _Problem | None:
    """The first reason ``value`` is not plain data, or None when it is.

    ``check_text`` also checks that every str encodes as UTF-8 (a lone
    surrogate does not); the fast path leaves that to the packer.
    """
    t = type(value)
    if t in _SCALARS:
        if check_text and t is str:
            try:
                value.encode()
            except UnicodeEncodeError:
                return _Problem("a str that is not valid UTF-8 (it holds a lone surrogate)")
        return None
    if t is int:
        if _INT_MIN <= value <= _INT_MAX:
            return None
        bits = value.bit_length()
        return _Problem(
            f"an int of {bits} bits, outside MessagePack's range -2**63 .. 2**64-1 "
            "(pass it as a str)"
        )
    if t not in _CONTAINERS:
        return _not_plain(value)
    if depth >= MAX_DEPTH:
        return _Problem(
            f"a {t.__name__} nested deeper than {MAX_DEPTH} levels (or one that holds itself)"
        )
    leaves = _STR_FREE_SCALARS if check_text else _SCALARS
    if t is dict:
        for key, item in value.items():
            if type(key) not in leaves:
                problem = _find_problem(key, depth + 1, check_text)
                if problem is not None:
                    return _Problem(problem.detail, (), in_key=True)
            if type(item) not in leaves:
                problem = _find_problem(item, depth + 1, check_text)
                if problem is not None:
                    return problem.within(key)
        return None
    for index, item in enumerate(value):
        # Inline checks of the common leaves keep long lists cheap.
        if type(item) in leaves or (type(item) is int and _INT_MIN <= item <= _INT_MAX):
            continue
        problem = _find_problem(item, depth + 1, check_text)
        if problem is not None:
            return problem.within(index)
    return None


def _default(obj: object) -> msgpack.ExtType:
    if type(obj) is tuple:
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(obj)))
    raise TypeError(f"not plain data: {_type_name(type(obj))}")


def _pack(value: object) -> bytes:
    packed: bytes = msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True)
    return packed


def _ext_hook(code: int, data: bytes) -> object:
    if code == _EXT_TUPLE:
        return tuple(_unpack(data))
    raise ValueError(f"unknown MessagePack ext type {code}")


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True)


# ------------------------------------------------------------------ pickling


class _DispatchTable(Mapping[type, Callable[..., object]]):
    """The reducers `_Pickler` uses: cloudpickle's own, then the process-wide
    `copyreg.dispatch_table` (read live, as cloudpickle does) without its
    entries for exception classes and for tracebacks.

    Other libraries register reducers there for every exception class (tblib's
    ``pickling_support.install()``, which importing ``distributed`` runs, and
    distributed again for each exception a task raises): exceptions would
    then be pickled with their tracebacks, by tblib's functions, and need
    tblib to be read back. Leaving those entries out keeps exceptions pickled
    by their own ``__reduce_ex__`` (no traceback, as plain cloudpickle does
    when no such library is loaded) and a traceback unpicklable, whatever was
    imported; every other registration (``complex``, ``re.Pattern``, a
    library's own types) is kept.
    """

    def __getitem__(self, cls: type) -> Callable[..., object]:
        own: dict[type, Callable[..., object]] = cloudpickle.Pickler._dispatch_table
        if cls in own:
            return own[cls]
        if cls is TracebackType or (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise KeyError(cls)
        reducer: Callable[..., object] = copyreg.dispatch_table[cls]
        return reducer

    def __iter__(self) -> Iterator[type]:
        keys = [*cloudpickle.Pickler._dispatch_table, *copyreg.dispatch_table]
        return iter([cls for cls in dict.fromkeys(keys) if cls in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler with `_DispatchTable` for its ``dispatch_table``
    (cloudpickle's is its own reducers chained with all of
    `copyreg.dispatch_table`)."""

    dispatch_table: ClassVar[_DispatchTable] = _DispatchTable()


def _cloudpickle(value: object) -> bytes:
    """``cloudpickle.dumps(value, protocol=5)``, the same bytes it writes when no
    library has registered reducers for exceptions (`_Pickler`)."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=_PICKLE_PROTOCOL).dump(value)
        return file.getvalue()


def _locate_unpicklable(value: Any) -> tuple[object, ...]:
    """The path, through plain containers, to the first part of ``value`` that
    does not pickle (empty when it is the value itself)."""
    t = type(value)
    if t is dict:
        children: list[tuple[object, object]] = list(value.items())
    elif t is list or t is tuple:
        children = list(enumerate(value))
    else:
        return ()
    for step, child in children:
        try:
            _cloudpickle(child)
        except Exception:
            return (step, *_locate_unpicklable(child))
    return ()


def _clip(text: str, limit: int, keep_tail: bool) -> str:
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    return marker + text[-limit:] if keep_tail else text[:limit] + marker


def _exception_text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<{_type_name(type(error))} whose str() failed>"


# --------------------------------------------------------------------- codec


class Codec:
    """Encodes the values and exceptions of workflows, steps and jobs.

    ``signing_key`` (bytes, or a str encoded as UTF-8; use at least 32
    random bytes) signs every pickle this codec writes and makes it refuse
    every pickle it cannot verify. A list of keys rotates: the first signs,
    every one verifies. ``mode`` is ``"auto"`` (MessagePack for
    plain data, cloudpickle for the rest) or ``"msgpack"`` (plain data
    only: other values are refused with `CodecError`, and stored pickles are
    never read). ``what`` in every method names the value in error messages,
    e.g. ``"argument 'order' of workflow 'shop.checkout'"``. A bad option
    (an empty key or list, a key that is not bytes or a str, an unknown
    mode) raises `InvalidArgument`.
    """

    def __init__(
        self,
        *,
        signing_key: bytes | str | Sequence[bytes | str] | None = None,
        mode: Literal["auto", "msgpack"] = "auto",
    ) -> None:
        if mode not in ("auto", "msgpack"):
            raise InvalidArgument(f"codec mode {mode!r} is not one of 'auto', 'msgpack'")
        self._keys = _signing_keys(signing_key)
        self._key = self._keys[0] if self._keys else None
        self._mode: Literal["auto", "msgpack"] = mode

    @property
    def mode(self) -> Literal["auto", "msgpack"]:
        """``"auto"`` or ``"msgpack"``."""
        return self._mode

    @property
    def signed(self) -> bool:
        """Whether this codec has a signing key (signs and verifies pickles)."""
        return self._key is not None

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The `key_fingerprint` of each signing key, the signing one first
        (empty without a key). The keys themselves are never shown."""
        return tuple(key_fingerprint(k) for k in self._keys)

    def __repr__(self) -> str:
        return f"Codec(mode={self._mode!r}, signed={self.signed})"

    # ------------------------------------------------------------- values

    def dumps(self, value: object, *, what: str) -> bytes:
        """Encode ``value``: MessagePack when it is plain data, else a pickle
        (signed with the key) in ``"auto"`` mode; `CodecError` naming
        ``what``, the type and its place in the value in ``"msgpack"`` mode
        (or when it does not pickle)."""
        problem = _find_problem(value, 0, check_text=False)
        if problem is None:
            try:
                return bytes((FORMAT_VERSION, _MSGPACK)) + _pack(value)
            except (TypeError, ValueError) as e:  # a lone surrogate in a str
                problem = _find_problem(value, 0, check_text=True) or _Problem(
                    f"not encodable as MessagePack ({e})"
                )
        if self._mode == "msgpack":
            # Dataclasses, models, named tuples and enums as plain data
            # (validated back into their type where they are read).
            converted = to_plain(value)
            remaining = _find_problem(converted, 0, check_text=True)
            if remaining is None:
                return bytes((FORMAT_VERSION, _MSGPACK)) + _pack(converted)
            problem = remaining
            raise CodecError(
                f"cannot encode {what} with codec='msgpack': {problem.describe()}; pass "
                f"plain data ({_PLAIN_TYPES}) or use codec='auto', which pickles other values"
            )
        return self._pickle(value, what)

    def loads(self, data: bytes, *, what: str) -> Any:
        """Decode a frame written by `dumps`.

        `UntrustedPayload` for a pickle that cannot be verified (unsigned or
        tampered while this codec has a key, signed while it has none),
        `CodecError` for a pickle in ``"msgpack"`` mode, for one that does
        not unpickle here, and for bytes that are not a value frame.
        """
        kind, body = self._split(data, what)
        if kind == _MSGPACK:
            try:
                return _unpack(body)
            except Exception as e:
                raise CodecError(f"stored {what} is corrupt MessagePack: {e}") from e
        if kind == _ERROR:
            raise CodecError(f"stored {what} is an exception record, not a value")
        return self._unpickle(kind, body, what)

    # --------------------------------------------------------- exceptions

    def dumps_error(self, error: BaseException, *, what: str) -> bytes:
        """Encode an exception: its type, module, message and formatted
        traceback, plus (in ``"auto"`` mode, when it pickles) the exception
        itself, signed like any pickle. Never raises for an odd exception:
        what does not encode is left out."""
        t = type(error)
        record: dict[str, object] = {
            "type": t.__qualname__,
            "module": t.__module__,
            "message": _clip(_exception_text(error), _MAX_MESSAGE, keep_tail=False),
            "traceback": _clip(
                "".join(traceback.format_exception(error)), _MAX_TRACEBACK, keep_tail=True
            ),
        }
        if self._mode == "auto":
            try:
                frame = self._pickle(error, what)
            except CodecError:
                frame = b""
            if 0 < len(frame) <= _MAX_ERROR_PICKLE:
                record["pickle"] = frame
        return bytes((FORMAT_VERSION, _ERROR)) + _pack(record)

    def loads_error(
        self, data: bytes, *, what: str, run_id: str | None = None, strict: bool = False
    ) -> BaseException:
        """The exception stored by `dumps_error`: the original one (with its
        stored traceback as a note) when its pickle is there, verifies and
        unpickles; else `WorkflowFailed` with the type name, message and
        traceback (a note says why the original was not rebuilt).

        ``run_id`` goes on the `WorkflowFailed`. `CodecError` only when the
        bytes are not an exception record; with ``strict``, `UntrustedPayload`
        when its pickle cannot be verified (a replay must see the exception
        the first run saw, or none).
        """
        kind, body = self._split(data, what)
        if kind != _ERROR:
            raise CodecError(f"stored {what} is not an exception record")
        try:
            record = _unpack(body)
            if not isinstance(record, dict):
                raise ValueError(f"it holds a {type(record).__name__}, not a map")
            type_name = _record_str(record, "type")
            module = _record_str(record, "module")
            message = _record_str(record, "message")
            tb = _record_str(record, "traceback")
            frame = record.get("pickle", b"")
            if not isinstance(frame, bytes):
                raise ValueError("field 'pickle' is not bytes")
        except Exception as e:
            raise CodecError(f"stored {what} is a corrupt exception record: {e}") from e
        note = f"traceback of the original exception ({what}):\n{tb.rstrip()}"
        reason = (
            "the record holds no pickle of it (it did not pickle, its pickle was over "
            f"{_MAX_ERROR_PICKLE} bytes, or the writer used codec='msgpack')"
        )
        if frame:
            try:
                kind, body = self._split(frame, what)
                if kind not in (_PICKLE, _SIGNED):
                    raise CodecError(f"stored {what} holds a frame of kind {chr(kind)!r}")
                error = self._unpickle(kind, body, what)
                if not isinstance(error, BaseException):
                    raise CodecError(f"stored {what} unpickled to a {_type_name(type(error))}")
            except (CodecError, UntrustedPayload) as e:
                if strict and isinstance(e, UntrustedPayload):
                    raise
                reason = str(e)
                if isinstance(e, UntrustedPayload):
                    log.warning("untrusted exception pickle refused", what=what, reason=e.reason)
            else:
                error.add_note(note)
                return error
        full_name = type_name if module == "builtins" else f"{module}.{type_name}"
        failed = WorkflowFailed(run_id or "", full_name, message, tb)
        if run_id is None:
            failed.args = (f"{what} is a {full_name}: {message}",)
        failed.add_note(f"the original exception was not rebuilt: {reason}")
        failed.add_note(note)
        return failed

    # ------------------------------------------------------------ framing

    def _split(self, data: bytes, what: str) -> tuple[int, bytes]:
        """The kind and payload of a frame; `CodecError` when it is not one."""
        if len(data) < _HEADER_SIZE:
            raise CodecError(f"stored {what} is corrupt: {len(data)} bytes is no frame")
        version, kind = data[0], data[1]
        if version > FORMAT_VERSION:
            raise CodecError(
                f"stored {what} has codec format version {version}, this durable reads "
                f"versions up to {FORMAT_VERSION}: upgrade durable"
            )
        if version < 1 or kind not in (_MSGPACK, _PICKLE, _SIGNED, _ERROR):
            raise CodecError(f"stored {what} is corrupt: unknown frame header {bytes(data[:2])!r}")
        return kind, bytes(data[_HEADER_SIZE:])

    @staticmethod
    def _mac(key: bytes, header: bytes, payload: bytes) -> bytes:
        mac = hmac.new(key, header, hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def _verified(self, mac: bytes, payload: bytes) -> bool:
        """Whether ``mac`` signs ``payload`` under one of the keys (each
        compared in constant time)."""
        header = bytes((FORMAT_VERSION, _SIGNED))
        if len(mac) != _MAC_SIZE:
            return False
        return any(hmac.compare_digest(mac, self._mac(k, header, payload)) for k in self._keys)

    def _pickle(self, value: object, what: str) -> bytes:
        try:
            payload = _cloudpickle(value)
        except Exception as e:
            path = _locate_unpicklable(value)
            place = f" ({_where(path)} does not)" if path else ""
            raise CodecError(
                f"cannot encode {what}: it is not plain data and does not pickle{place}: "
                f"{type(e).__name__}: {e}; pass plain data ({_PLAIN_TYPES}) or objects "
                "that pickle"
            ) from e
        if self._key is None:
            _warn_unsigned("written", what)
            return bytes((FORMAT_VERSION, _PICKLE)) + payload
        header = bytes((FORMAT_VERSION, _SIGNED))
        return header + self._mac(self._key, header, payload) + payload

    def _unpickle(self, kind: int, body: bytes, what: str) -> Any:
        """Verify, then unpickle: nothing is unpickled before it is trusted."""
        if self._mode == "msgpack":
            raise CodecError(
                f"stored {what} is a {_KIND_NAMES[kind]}, and codec='msgpack' never "
                "unpickles; read it with codec='auto' (and the writer's signing_key)"
            )
        if kind == _SIGNED:
            if self._key is None:
                raise UntrustedPayload(
                    what,
                    "it is signed and this Engine has no signing_key to verify it; pass "
                    "the signing_key of the process that wrote it",
                )
            mac, payload = body[:_MAC_SIZE], body[_MAC_SIZE:]
            if not self._verified(mac, payload):
                raise UntrustedPayload(
                    what, "its signature does not match (tampered, or signed with another key)"
                )
        elif self._key is not None:
            raise UntrustedPayload(what, "it is not signed")
        else:
            payload = body
            _warn_unsigned("read", what)
        try:
            return cloudpickle.loads(payload)
        except Exception as e:
            raise CodecError(
                f"cannot unpickle stored {what}: {type(e).__name__}: {e}; the classes it "
                "uses must be importable in this process"
            ) from e


def key_fingerprint(key: bytes | str) -> str:
    """A fingerprint of signing key ``key``: the first 16 bytes, in hex, of an
    HMAC-SHA256 under the key of a fixed label. It tells keys apart (a
    store records the fingerprints of the keys its pickles need) and
    reveals nothing of the key."""
    if isinstance(key, str):
        key = key.encode()
    return hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]


def _signing_keys(signing_key: object) -> tuple[bytes, ...]:
    """The ``signing_key`` option as a tuple of keys (empty: none)."""
    if signing_key is None:
        return ()
    if isinstance(signing_key, bytes | str):
        return (_signing_key(signing_key, "signing_key"),)
    if not isinstance(signing_key, list | tuple):
        raise InvalidArgument(
            f"signing_key is a {_type_name(type(signing_key))}; pass bytes or a str "
            "(a secret of at least 32 random bytes), a list of them to rotate keys, or None "
            "to write unsigned pickles"
        )
    if not signing_key:
        raise InvalidArgument(
            "signing_key is an empty list: pass the keys (the first signs, every one "
            "verifies), or None to write unsigned pickles"
        )
    return tuple(_signing_key(k, f"signing_key[{i}]") for i, k in enumerate(signing_key))


def _signing_key(key: object, name: str) -> bytes:
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes):
        raise InvalidArgument(
            f"{name} is a {_type_name(type(key))}; pass bytes or a str "
            "(a secret of at least 32 random bytes), or None to write unsigned pickles"
        )
    if not key:
        raise InvalidArgument(
            f"{name} is empty: pass a secret (bytes or a str; at least 32 random "
            "bytes), or None to write unsigned pickles"
        )
    return key


def _record_str(record: dict[object, object], field: str) -> str:
    value = record.get(field)
    if not isinstance(value, str):
        raise ValueError(f"field {field!r} is not a str")
    return value
