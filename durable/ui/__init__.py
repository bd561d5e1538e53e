"""``durable ui URL``: a read-only HTML view of a store's runs, served locally.

The server (`durable.ui.server`, aiohttp) opens the store as a client
(``Engine(url, role="client")``: it reads through the read-only view,
never fences the owner and never creates a store) and answers the page's
JSON requests from `durable.ui.data`. The page (``static/``: one HTML
file, one script, one style sheet; no build step, nothing fetched from
elsewhere) shows the run list with filters and pages, one run's timeline,
and the run groups with their progress, refreshed every 2 seconds. See
``docs/operating.md``, "The run view".
"""

from __future__ import annotations

from durable.ui.server import create_app, serve

__all__ = ["create_app", "serve"]
