"""Persistence of the Controller's desired state (RFC §5 "Controller 重启").

Only what a restart needs is persisted, per instance: phase, generation, original_dp_ranks,
dead_committed, fallback_strategy, and the topology needed to re-assemble the instance. Observed
state (engine statuses, fault evidence, timelines) is rebuilt after a restart, never persisted.

- `records`: the record (`PersistedInstance`), its canonical JSON encoding and the pydantic
  validation of records written and read (`encode_record`, `decode_record`).
- `errors`: `StoreError`, `StaleWriteError` (a lost compare-and-set on the generation) and
  `FencedWriteError` (a write of a replica that does not lead).
- `base`: the `RuntimeStore` protocol, its CAS and fail-closed semantics, and the caller-side
  checks both backends share.
- `memory`: `MemoryRuntimeStore`, the embedded default without etcd; state is lost on restart.
- `etcd`: `EtcdRuntimeStore`, etcd v3 key layout and one CAS transaction per write; with replicas
  electing a leader every write is also conditioned on the leader key's create revision (the
  writer's term), so a deposed leader's write fails (`FencedWriteError`).
- `etcd_connection`: `EtcdConnection`, endpoint probing and failover, bounded calls, errors mapped
  to `StoreError`.
- `factory`: `open_runtime_store`, the backend the configuration asks for.
- `persister`: `RuntimePersister`, the glue between the in-memory runtime and a store
  (compare-and-set on the generation) and the restart rule (also a new leader's takeover rule);
  `read_only_view`, what a standby replica reports.
"""

from motor.controller.persistence.base import RuntimeStore
from motor.controller.persistence.errors import StaleWriteError, StoreError
from motor.controller.persistence.etcd import EtcdRuntimeStore
from motor.controller.persistence.factory import open_runtime_store
from motor.controller.persistence.memory import MemoryRuntimeStore
from motor.controller.persistence.records import PersistedInstance, decode_record, encode_record

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
