"""Fixtures of the decorator tests: the mock clock every engine runs on."""

from __future__ import annotations

import pytest

from durable.store.clock import MockClock


@pytest.fixture
def clock() -> MockClock:
    """The clock of every engine a test opens."""
    return MockClock()
