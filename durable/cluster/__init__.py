"""Many processes on one store: who owns it, and how the others reach the owner.

The layer between the decorators and the engine (`durable.decorators` ->
`durable.cluster` -> `durable.engine` -> `durable.store`). One concept per
module: membership heartbeats and liveness (`durable.cluster.members`), the
owner chain (`durable.cluster.chain`), who acquires (`durable.cluster.decide`)
and the ownership state machine that drives them (`durable.cluster.owner`).
"""
