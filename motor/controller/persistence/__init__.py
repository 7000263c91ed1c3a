"""Persistence of the Controller's desired state (RFC §5 "Controller 重启").

- `store`: the record (`PersistedInstance`), its encoding, the `RuntimeStore` protocol with its
  memory and etcd backends, and `open_runtime_store`.
- `persister`: `RuntimePersister`, the glue between the in-memory runtime and a store
  (compare-and-set on the generation) and the restart rule.
"""

from motor.controller.persistence.store import (
    EtcdRuntimeStore,
    MemoryRuntimeStore,
    PersistedInstance,
    RuntimeStore,
    StaleWriteError,
    StoreError,
    decode_record,
    encode_record,
    open_runtime_store,
)

__all__ = [
    "EtcdRuntimeStore",
    "MemoryRuntimeStore",
    "PersistedInstance",
    "RuntimeStore",
    "StaleWriteError",
    "StoreError",
    "decode_record",
    "encode_record",
    "open_runtime_store",
]
