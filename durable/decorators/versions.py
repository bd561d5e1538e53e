"""Workflow versions: which code a run was started under.

``@workflow(version="2024-06-v2")`` pins a workflow's version; without it
the version is derived from the code (`code_version`): the first 12 hex
digits of the SHA-256 of the workflow function's normalised source, the
function parsed and unparsed again (`ast.unparse`) without its decorators
and its docstring. So the version changes when the function's own code
changes (a step added, removed or reordered, a branch, an argument, a
constant), and not with comments, blank lines, formatting, the docstring,
the decorator's options, or the Python release. It does not see the code
the function calls: the bodies of its steps (which may change freely: a
journaled step is not run again) or of helpers that call steps (which
may not: pin ``version=`` when such a change alters what the workflow
calls). A function whose source cannot be read (defined in an
interactive session) gets the hash of its bytecode instead.

The version is recorded in the run's index entry (`durable.decorators.index`)
by the commit that starts the run, so it is the version of the code of
the process that *started* the run; it shows in ``handle.status()``, in
``engine.runs()`` (which filters on it: ``engine.runs(version=...)``) and
in ``durable runs`` / ``durable show``. A version never changes how a run
executes: the process that runs it always runs the code it has; use
``durable.patched()`` to keep old runs on their branch
(`durable.decorators.patching`, docs/versioning.md).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

from durable.errors import DecoratorError

__all__ = ["MAX_VERSION", "check_version", "code_version"]

#: The longest pinned version, in characters.
MAX_VERSION = 64


def check_version(version: object) -> str | None:
    """``version`` if it is a valid pinned version (or None); `DecoratorError` else."""
    if version is None:
        return None
    if not isinstance(version, str) or not version or len(version) > MAX_VERSION:
        raise DecoratorError(
            f"@workflow(version=...) takes a non-empty str of at most {MAX_VERSION} "
            f"characters, got {version!r:.80}"
        )
    if not version.isprintable():
        raise DecoratorError(f"@workflow(version=...) must be printable, got {version!r:.80}")
    return version


def code_version(fn: Callable[..., Any]) -> str:
    """The version derived from ``fn``'s code; see the module docstring."""
    return hashlib.sha256(_normalised(fn)).hexdigest()[:12]


def _normalised(fn: Callable[..., Any]) -> bytes:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return _bytecode(fn)
    node = next(
        (n for n in tree.body if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)), None
    )
    if node is None:  # not a def (a lambda, a callable object)
        return _bytecode(fn)
    node.decorator_list = []
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        node.body = body[1:] or [ast.Pass()]
    return ast.unparse(node).encode()


def _bytecode(fn: Callable[..., Any]) -> bytes:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return getattr(fn, "__qualname__", type(fn).__qualname__).encode()
    return b"code:" + _code_bytes(code)


def _code_bytes(code: types.CodeType) -> bytes:
    """The bytecode, names and constants of ``code``, nested code included
    (no memory address: the same in every process)."""
    parts = [code.co_code, repr(code.co_names).encode()]
    for const in code.co_consts:
        parts.append(
            _code_bytes(const) if isinstance(const, types.CodeType) else repr(const).encode()
        )
    return b"\0".join(parts)
