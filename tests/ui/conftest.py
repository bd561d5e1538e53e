"""The store the run view's tests read (`ui_flows.build`), built once per module."""

from __future__ import annotations

import asyncio

import pytest
from ui_flows import Built, build


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A store built by `build` (once per module)."""
    url = str(tmp_path_factory.mktemp("ui") / "store")
    return asyncio.run(build(url))
