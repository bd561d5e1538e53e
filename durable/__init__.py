"""durable: durable execution for async Python on object storage."""

__version__ = "0.1.0.dev0"
