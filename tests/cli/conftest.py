"""A store the CLI tests read (`cli_helpers.build`), built once per module."""

from __future__ import annotations

import asyncio

import pytest
from cli_helpers import Built, build


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A store built by `build` (once per module)."""
    url = str(tmp_path_factory.mktemp("cli") / "store")
    return asyncio.run(build(url))
