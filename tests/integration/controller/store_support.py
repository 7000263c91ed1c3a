"""What the runtime store tests share: a sample record, an etcd store under a test's own prefix, and
a frozen etcd server."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from motor.testing.waits import async_wait_for

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


def _every_thread_stopped(pid: int) -> bool:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append(task.joinpath("stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return bool(states) and all(state in ("T", "t") for state in states)


@contextlib.asynccontextmanager
async def frozen(pid: int) -> AsyncIterator[None]:
    """The server stopped (SIGSTOP) inside the block and resumed after it. SIGSTOP reaches each of
    etcd's threads as it is next scheduled, so on a busy machine a call sent at once could still be
    served: the block starts only once every thread is stopped."""
    os.kill(pid, signal.SIGSTOP)
    try:
        await async_wait_for(lambda: _every_thread_stopped(pid), 10.0, "etcd's threads stopped", interval_sec=0.01)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
