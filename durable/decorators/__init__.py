"""``@workflow``, ``@step`` and ``@job`` on top of the engine: being built."""
