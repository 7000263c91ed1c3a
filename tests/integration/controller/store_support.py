"""What the runtime store tests share: a sample record and an etcd store under a test's own prefix."""

from __future__ import annotations

import dataclasses

from motor.controller.config import StoreConfig
from motor.controller.persistence import EtcdRuntimeStore, PersistedInstance, open_runtime_store


def record(instance_id: int = 1, generation: int = 0, **changes: object) -> PersistedInstance:
    base = PersistedInstance(
        instance_id=instance_id,
        phase="NORMAL",
        generation=generation,
        original_dp_ranks=(0, 1, 2, 3),
        dead_committed=(),
        fallback_strategy="instance_reconfiguration",
        topology=bytes(range(256)),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def etcd_store(endpoint: str, prefix: str, timeout_sec: float = 5.0) -> EtcdRuntimeStore:
    store = open_runtime_store(StoreConfig(etcd_endpoints=[endpoint], key_prefix=prefix,
                                           request_timeout_sec=timeout_sec))
    assert isinstance(store, EtcdRuntimeStore)
    return store
