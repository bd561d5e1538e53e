"""The data plane: object stores, the transactional log, the queue and KV."""
