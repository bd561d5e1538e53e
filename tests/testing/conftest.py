"""The durable pytest plugin's fixtures, for these tests whether or not the
package's ``pytest11`` entry point is installed in this environment."""

from durable.testing.pytest_plugin import durable_clock, durable_engine, durable_local_engine

__all__ = ["durable_clock", "durable_engine", "durable_local_engine"]
