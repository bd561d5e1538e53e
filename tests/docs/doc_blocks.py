"""Extract and run the ```python blocks of a docs page (tests/docs/test_doc_blocks.py).

A page's blocks run in order, in one namespace (a module of their own, so
the workflows they define get names of their own), in a fresh temporary
directory as the working directory. Each block is compiled with top-level
``await`` allowed: a block that awaits runs in ``asyncio.run`` of its own;
a block that does not is executed as a script would be (so it may call
``asyncio.run(main())`` itself).

Markers, on the last non-blank line before a block's fence (HTML comments:
mkdocs does not render them):

- ``<!-- skip: reason -->``: the block is not run; the reason is required
  (a cloud bucket, a process that runs until it is killed, ...).

A block inside ``<!-- doc-setup`` ... ``-->`` is not rendered but runs
where it stands: the definitions a fragment on the page assumes.

The awaiting blocks of a page share one event loop and one context, so a
setup block may open an engine that later fragments use:
``engine = await doc_cleanup.enter_async_context(Engine("memory://x"))``
(``doc_cleanup``, an ``AsyncExitStack``, is closed after the page's blocks).

After its blocks ran, each ``async def test_*`` function the page defined
is called, with the fixtures of the durable pytest plugin it names
(``durable_clock``, ``durable_engine``, ``durable_local_engine``), once per
case of its ``@pytest.mark.parametrize`` marks.
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import inspect
import re
import sys
import types
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^\n`]*)$")
SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    source: str
    skip: str | None  # the stated reason, when skipped
    setup: bool  # inside a <!-- doc-setup --> comment


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page``, in order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    in_setup = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("<!-- doc-setup"):
            in_setup = True
        elif in_setup and line.strip() == "-->":
            in_setup = False
        m = FENCE.match(line)
        if m is None:
            i += 1
            continue
        info = m.group("info").strip()
        indent = len(m.group("indent"))
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        i += 1  # the closing fence
        if not (info == "python" or info.startswith("python ")):
            continue
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        skip = SKIP.match(lines[j]) if j >= 0 else None
        found.append(
            Block(
                page=page,
                line=start + 1,
                source="\n".join(body) + "\n",
                skip=skip.group("reason") if skip else None,
                setup=in_setup,
            )
        )
    return found


def _module(page: Path) -> types.ModuleType:
    stem = re.sub(r"\W", "_", page.stem)
    name = f"docs_{stem}_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module  # cloudpickle and the codec find the page's classes
    return module


def run_block(
    block: Block,
    namespace: dict[str, Any],
    runner: asyncio.Runner | None = None,
    context: contextvars.Context | None = None,
) -> None:
    """Run one block in ``namespace``; an exception names the page and line.

    An awaiting block runs on ``runner`` (the page's loop) in ``context``; a
    block that does not await runs as a script, in ``context`` too.
    """
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    filename = f"{block.page.name}:{block.line}"
    padded = "\n" * block.line + block.source  # tracebacks give the page's line numbers
    code = compile(padded, filename, "exec", flags=flags, dont_inherit=True)
    context = context if context is not None else contextvars.copy_context()
    if code.co_flags & inspect.CO_COROUTINE:
        if runner is None:
            with asyncio.Runner() as own:
                own.run(eval(code, namespace), context=context)
        else:
            runner.run(eval(code, namespace), context=context)
    else:
        context.run(exec, code, namespace)


@asynccontextmanager
async def _fixtures(names: list[str], tmp: Path) -> AsyncIterator[dict[str, Any]]:
    from durable import Engine
    from durable.store.clock import MockClock

    clock = MockClock()
    values: dict[str, Any] = {"durable_clock": clock}
    async with AsyncExitStack() as stack:
        if "durable_engine" in names:
            url = f"memory://docs-{uuid.uuid4().hex}"
            values["durable_engine"] = await stack.enter_async_context(Engine(url, clock=clock))
        if "durable_local_engine" in names:
            engine = Engine(tmp / "durable-store", clock=clock)
            values["durable_local_engine"] = await stack.enter_async_context(engine)
        if "tmp_path" in names:
            values["tmp_path"] = tmp
        yield values


def _parametrized(fn: Callable[..., Any]) -> list[dict[str, Any]]:
    """The keyword arguments of each call of ``fn``: one per case of its
    ``@pytest.mark.parametrize`` marks (one argument name each), or one call."""
    cases: list[dict[str, Any]] = [{}]
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            argname, values = mark.args[0], mark.args[1]
            assert "," not in argname, f"{fn.__name__}: one parameter per parametrize"
            assert values, f"{fn.__name__}: parametrize {argname!r} has no values"
            cases = [{**case, argname: value} for case in cases for value in values]
    return cases


def run_tests(namespace: dict[str, Any], tmp: Path) -> list[str]:
    """Call every ``async def test_*`` the page defined; their names."""
    ran: list[str] = []
    for name, fn in list(namespace.items()):
        if not (name.startswith("test_") and inspect.iscoroutinefunction(fn)):
            continue
        params = list(inspect.signature(fn).parameters)

        async def call(
            fn: Callable[..., Any] = fn, params: list[str] = params, **given: Any
        ) -> None:
            async with _fixtures(params, tmp) as values:
                values.update(given)
                await fn(**{p: values[p] for p in params})

        for given in _parametrized(fn):
            asyncio.run(call(**given))
        ran.append(name)
    return ran


def run_page(page: Path, tmp: Path) -> tuple[int, list[str], list[str]]:
    """Run every block of ``page`` (cwd must be ``tmp``); (blocks run, skips, tests)."""
    import logging

    import durable.events

    loggers = [logging.getLogger(), logging.getLogger("durable")]
    saved = [(lg, lg.level, list(lg.handlers)) for lg in loggers]
    module = _module(page)
    namespace = module.__dict__
    cleanup = AsyncExitStack()
    namespace["doc_cleanup"] = cleanup
    context = contextvars.copy_context()
    ran = 0
    skipped: list[str] = []
    try:
        with asyncio.Runner() as runner:
            try:
                for block in blocks(page):
                    if block.skip is not None:
                        skipped.append(f"{block.page.name}:{block.line}: {block.skip}")
                        continue
                    run_block(block, namespace, runner, context)
                    ran += 1
            finally:
                runner.run(cleanup.aclose(), context=context)
        tests = run_tests(namespace, tmp)
    finally:
        sys.modules.pop(module.__name__, None)
        durable.events.disable()  # a page may enable the events, or configure logging
        for lg, level, handlers in saved:
            lg.setLevel(level)
            lg.handlers[:] = handlers
    return ran, skipped, tests
