"""Many processes on one store: who owns it, how the others reach the owner and read.

One process at a time *owns* a store: it holds the store's log writer and
runs its workflows. Every other process reaches the owner through the
store's *inbox*: it writes each request (submit a run, signal, cancel, clear
a signal, mark a group) as a create-if-absent object under ``inbox/``
(`durable.cluster.inbox.InboxWriter`), and the owner applies them
idempotently, each in one transaction with a record that it was applied,
and deletes them once that transaction is durable
(`durable.cluster.inbox.InboxApplier`). Non-owners read through the
store's read-only view, which never fences the owner.

Layering: this package sits between the decorators and the engine; it
imports `durable.engine` and `durable.store`, never `durable.decorators`.
"""

__all__: list[str] = []
