"""moto's S3 server with one write applied at a time (run by scripts/emulators.py).

moto_server serves each request on its own thread, and its conditional PUT
(``If-None-Match: *``) checks for the key and then stores it without a lock:
two racing creates of one key can both succeed. Real S3 applies a
conditional write atomically, and the tests rely on that (one winner per
create race, one owner per version). This launcher runs moto's own WSGI
application under werkzeug as moto_server does, behind a middleware that
holds one lock while a write is applied and its response is produced,
which makes writes atomic with respect to each other as S3's are (a
conditional PUT checks and stores under the lock). Reads do not take it, so
the polling of many processes does not queue behind the writes.

    python scripts/moto_serial.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Serialized:
    """A WSGI middleware: one write (PUT, POST, DELETE) at a time through
    ``app``, body included; reads (GET, HEAD) run beside them, as moto's
    lookups of its in-memory buckets are single dictionary reads."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") in ("GET", "HEAD"):  # reads need no turn
            return self._apply(environ, start_response)
        with self.lock:
            return self._apply(environ, start_response)

    def _apply(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        result = self.app(environ, start_response)
        try:
            return list(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        Serialized(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
