"""Many processes on one store: who owns it, how the others reach the owner and read.

One process at a time *owns* a store: it holds the store's log writer and
runs its workflows. Worker processes heartbeat a member object and agree on
the owner through a chain of create-if-absent versions
(`durable.cluster.members`, `durable.cluster.chain`, `durable.cluster.decide`,
driven by `durable.cluster.owner.Ownership`); a standby takes over when the
owner dies or releases, and the log's own fencing keeps a stale owner
harmless. Every other process reaches the owner through the store's
*inbox*: it writes each request (submit a run, signal, cancel, clear a
signal, mark a group) as a create-if-absent object under ``inbox/``
(`durable.cluster.inbox.InboxWriter`), and the owner applies them
idempotently, each in one transaction with a record that it was applied,
and deletes them once that transaction is durable
(`durable.cluster.applier.InboxApplier`). Non-owners read through the
store's read-only view, which never fences the owner.

The partitions of a partitioned store are shared by a pool of members through
the assignment table (`durable.cluster.assignment`): a chain of create-if-absent
versions naming each partition's owner, written by the lowest live member;
each worker follows it through its `durable.cluster.pool.PoolMember`.

Layering: this package sits between the decorators and the engine
(`durable.decorators` -> `durable.cluster` -> `durable.engine` ->
`durable.store`); it never imports `durable.decorators`.
"""

__all__: list[str] = []
