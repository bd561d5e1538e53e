"""The run view's HTTP server: the page, its static files and a JSON API.

Routes (all ``GET``; the server changes nothing in the store):

| route | answer |
|---|---|
| ``/`` | the page (``static/index.html``) |
| ``/static/{name}`` | its script and style sheet |
| ``/api/store`` | ``{"url": ...}``: the store it shows |
| ``/api/runs?...`` | a page of runs (`run_page`; query: ``state``, ``workflow``, |
| | ``attr=K=V``, ``started_after``, ``limit``, ``cursor``) |
| ``/api/runs/{run_id}`` | one run's timeline (`run_detail`) |
| ``/api/groups`` | the run groups with their progress (`list_groups`) |

An error is a JSON ``{"error": text}`` with status 400 (bad query), 404
(unknown run) or 500. Every answer carries a Content-Security-Policy that
allows only this origin's own files (no inline script, nothing from
elsewhere), so user data the page shows can never run as script.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from durable.decorators.engine import Engine
from durable.errors import DurableError, InvalidArgument, InvalidId, RunNotFound
from durable.ui.data import list_groups, run_detail, run_page

__all__ = ["ENGINE", "create_app", "serve"]

#: The app key of the client `Engine` the handlers read through.
ENGINE = web.AppKey("engine", Engine)
_URL = web.AppKey("url", str)
_FILES = web.AppKey("files", dict)

_TYPES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _load_files() -> dict[str, bytes]:
    folder = resources.files("durable.ui") / "static"
    return {name: (folder / name).read_bytes() for name in _TYPES}


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as JSON, and the security headers on every answer."""
    try:
        response = await handler(request)
    except web.HTTPException as e:
        response = _error(e.status, e.reason)
    except (InvalidArgument, InvalidId) as e:
        response = _error(400, str(e))
    except RunNotFound as e:
        response = _error(404, f"no run {e.run_id!r} in this store")
    except DurableError as e:
        response = _error(500, f"{type(e).__name__}: {e}")
    response.headers.update(_HEADERS)
    return response


def _file(name: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        body = request.app[_FILES][name]
        return web.Response(body=body, content_type=_TYPES[name], charset="utf-8")

    return handler


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "index.html" or name not in _TYPES:
        raise web.HTTPNotFound(reason=f"no file {name!r}")
    return await _file(name)(request)


async def _store(request: web.Request) -> web.Response:
    return web.json_response({"url": request.app[_URL]})


async def _runs(request: web.Request) -> web.Response:
    query = {name: request.query.getall(name) for name in request.query}
    return web.json_response(await run_page(request.app[ENGINE], query))


async def _run(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    return web.json_response(await run_detail(request.app[ENGINE], run_id))


async def _groups(request: web.Request) -> web.Response:
    return web.json_response({"groups": await list_groups(request.app[ENGINE])})


def create_app(engine: Engine, url: str) -> web.Application:
    """The run view's `web.Application` reading through ``engine`` (a client
    engine on the store at ``url``, entered by the caller)."""
    app = web.Application(middlewares=[_guard])
    app[ENGINE] = engine
    app[_URL] = url
    app[_FILES] = _load_files()
    app.router.add_get("/", _file("index.html"))
    app.router.add_get("/static/{name}", _static)
    app.router.add_get("/api/store", _store)
    app.router.add_get("/api/runs", _runs)
    app.router.add_get("/api/runs/{run_id}", _run)
    app.router.add_get("/api/groups", _groups)
    return app


def _address(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


async def serve(
    engine: Engine,
    url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], Any] = print,
    access_log: bool = False,
) -> None:
    """Serve the run view on ``host:port`` (port 0: a free one) until SIGINT
    or SIGTERM; ``ready`` gets the address served (``http://host:port/``)
    once it accepts connections."""
    quiet: dict[str, Any] = {} if access_log else {"access_log": None}
    runner = web.AppRunner(create_app(engine, url), **quiet)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            ready(_address(host, bound))
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    finally:
        await runner.cleanup()
