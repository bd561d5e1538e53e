"""The ``durable`` command line (``durable ...`` or ``python -m durable ...``).

A layer over `durable.decorators`: each command opens the store as a
client (``Engine(url, role="client")``, `durable.cli.store`), reads through
the read-only view and writes only inbox requests (cancel, signal,
requeue, fork's submission) that the store's owner applies. See
``docs/operating.md``, "The CLI".
"""

from __future__ import annotations

from durable.cli.app import app, main

__all__ = ["app", "main"]
