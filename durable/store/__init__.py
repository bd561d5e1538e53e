"""The data plane: object stores, the transactional log, the queue and KV.

- `durable.store.objects`: the object-store seam (`ObjectStore`, local
  directory, memory, fault injection).
- `durable.store.log`: the single-writer transactional log (`LogWriter`,
  `LogReader`, `WriteBatch`, `BlobStore`).
- `durable.store.queue`: the job queue (`Queue`, `QueueReader`, workers).
- `durable.store.kv`: the caller KV namespace; `durable.store.expiry`:
  time-ordered retention indexes.
- `durable.store.clock`: `Clock`, `SystemClock`, `MockClock`.
"""
