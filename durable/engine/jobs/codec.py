"""How a job is stored: its run input (the job) and its run result (the output).

A job's run input is the MessagePack map ``{"job": NAME, "input": {field:
value, ...}}``: the job type's name and the dataclass fields by name, map
keys sorted (so equal inputs are equal bytes, which is what duplicate
detection compares). Field values are plain data (None, bool, int, float,
str, bytes, lists, tuples, dicts, dataclasses); they read back in their
decoded form: tuples as lists, nested dataclasses as dicts.

A job's output is its run's result: MessagePack of the value, a dataclass
as the map of its fields. `decode_output` rebuilds a top-level dataclass
when the job type declares one (`durable.engine.jobs.job.output_type`);
nested ones read back as dicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgpack

from durable.engine.jobs.job import Job, check_job_type, output_type
from durable.engine.memo_codec import canonical, plain_default  # the memo's plain-data rules
from durable.errors import CorruptEngineRecord, JobTypeError

__all__ = ["decode_job", "decode_output", "encode_job", "encode_output", "job_name"]

_PLAIN = "plain data (None, bool, int, float, str, bytes, list, tuple, dict, dataclass)"


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_job(job: Job[Any]) -> bytes:
    """The run input of ``job``; `JobTypeError` if its type or fields are unusable."""
    cls = check_job_type(type(job))
    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}  # type: ignore[arg-type]
    try:
        return msgpack.packb(
            {"job": cls.NAME, "input": canonical(fields)}, default=plain_default, use_bin_type=True
        )
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise JobTypeError(
            f"job {cls.NAME!r}: its fields cannot be stored ({e}); use {_PLAIN}"
        ) from None


def _envelope(payload: bytes) -> tuple[str, Mapping[str, Any]]:
    try:
        envelope = _unpack(payload)
    except Exception as e:  # msgpack raises several unrelated types
        raise JobTypeError(f"a job's input is not MessagePack ({type(e).__name__}: {e})") from None
    name = envelope.get("job") if isinstance(envelope, dict) else None
    fields = envelope.get("input") if isinstance(envelope, dict) else None
    if not isinstance(name, str) or not isinstance(fields, dict):
        raise JobTypeError(
            f"a job's input is not a job (no 'job' name and 'input' map): {envelope!r:.200}"
        )
    return name, fields


def job_name(payload: bytes) -> str:
    """The job type's NAME stored in a run input; `JobTypeError` if it is not a job."""
    return _envelope(payload)[0]


def decode_job(payload: bytes, types: Mapping[str, type[Job[Any]]]) -> Job[Any]:
    """The job stored in ``payload``, built as its type registered in ``types``.

    `JobTypeError` (permanent) for an unknown NAME or fields that do not fit.
    """
    name, fields = _envelope(payload)
    cls = types.get(name)
    if cls is None:
        raise JobTypeError(
            f"no job type named {name!r} is registered on this runner: register its class "
            "with JobRunner.register() before spawn()"
        )
    try:
        return cls(**fields)
    except TypeError as e:
        raise JobTypeError(
            f"job {name!r}: the stored input does not fit {cls.__qualname__}: {e}"
        ) from None


def encode_output(name: str, value: Any) -> bytes:
    """The stored result of an output of job type ``name``; `JobTypeError` if not plain data."""
    try:
        return msgpack.packb(value, default=plain_default, use_bin_type=True)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise JobTypeError(
            f"job {name!r}: its output cannot be stored ({e}); return {_PLAIN}"
        ) from None


def decode_output(data: bytes, cls: type[Job[Any]] | None) -> Any:
    """The output stored as ``data``; a dataclass when ``cls`` declares one.

    `CorruptEngineRecord` if ``data`` is not MessagePack, `JobTypeError` if it
    does not fit the declared output type.
    """
    try:
        value = _unpack(data)
    except Exception as e:  # msgpack raises several unrelated types
        what = "output of a job" if cls is None else f"output of job {cls.NAME!r}"
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from None
    if cls is None:
        return value
    target = output_type(cls)
    if target is None or not isinstance(value, dict):
        return value
    try:
        return target(**value)
    except TypeError as e:
        raise JobTypeError(
            f"job {cls.NAME!r}: the stored result does not fit {target.__qualname__}: {e}"
        ) from None
