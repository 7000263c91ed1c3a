"""An in-memory etcd of one member on the virtual clock: what the REAL `EtcdConnection`,
`EtcdRuntimeStore` and `LeaderElection` ask of aetcd's client, with etcd's semantics.

Keys carry create/mod revisions and versions; every write transaction takes one new revision;
leases expire in virtual time (their keys deleted then, as etcd does); `watch_once` returns the
first change of a key at or after a revision, or raises aetcd's `WatchTimeoutError`. Each client
belongs to one Controller process (`owner`: its `host` and whether it is `alive`): a dead process's
calls fail at once, a host cut off from etcd (`cut`) has its calls hang until the cut heals (the
connection's request deadline ends them first). `failing` is a store outage: every transaction
that writes a runtime record fails (reads, leases and the leader key still answer, as under
etcd's space alarm). Every operation runs without awaiting once it is delivered, so it is atomic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

import aetcd
import aetcd.client
import aetcd.rpc
import aetcd.transactions as tx

from motor.controller.persistence.records import decode_record

_LATENCY_SEC = 0.002
_OPS = {aetcd.rpc.Compare.EQUAL: lambda a, b: a == b, aetcd.rpc.Compare.NOT_EQUAL: lambda a, b: a != b,
        aetcd.rpc.Compare.LESS: lambda a, b: a < b, aetcd.rpc.Compare.GREATER: lambda a, b: a > b}


@dataclass
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass
class _Lease:
    ttl: int
    expires_at: float
    keys: set[bytes] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None


class Owner(Protocol):
    host: str
    alive: bool


class SimEtcd:
    def __init__(self, loop: asyncio.AbstractEventLoop, key_prefix: str) -> None:
        self._loop = loop
        self.key_prefix = key_prefix
        self._records = f"{key_prefix}/instances/".encode()
        self._kv: dict[bytes, KeyValue] = {}
        self._leases: dict[int, _Lease] = {}
        self._changes: dict[bytes, list[int]] = {}
        self._next_lease = 0x1000
        self.revision = 1
        self._changed = asyncio.Event()
        self._cuts: dict[str, asyncio.Event] = {}
        self.failing = False

    # -- faults ---------------------------------------------------------------------------------
    def cut(self, host: str) -> None:
        self._cuts.setdefault(host, asyncio.Event())

    def heal(self, host: str) -> None:
        healed = self._cuts.pop(host, None)
        if healed is not None:
            healed.set()

    def is_cut(self, host: str) -> bool:
        return host in self._cuts

    async def deliver(self, owner: Owner, what: str) -> None:
        """A request of `owner` reaches etcd (or fails, or hangs while its host is cut off)."""
        if not owner.alive:
            raise aetcd.ConnectionFailedError(f"{what}: the process is gone")
        while owner.host in self._cuts:
            await self._cuts[owner.host].wait()
        await asyncio.sleep(_LATENCY_SEC)
        if not owner.alive:
            raise aetcd.ConnectionFailedError(f"{what}: the process is gone")
        self._expire()

    # -- what the world reads --------------------------------------------------------------------
    def held(self, instance_id: int):
        """The record the store holds now (what a new leader restores)."""
        kv = self._kv.get(self._records + str(instance_id).encode())
        return None if kv is None else decode_record(kv.value, key=kv.key.decode())

    def leader(self) -> KeyValue | None:
        self._expire()
        return self._kv.get(f"{self.key_prefix}/leader".encode())

    # -- etcd ------------------------------------------------------------------------------------
    def _expire(self) -> None:
        now = self._loop.time()
        for lease_id in [i for i, lease in self._leases.items() if lease.expires_at <= now]:
            self._revoke(lease_id)

    def _revoke(self, lease_id: int) -> bool:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return False
        if lease.timer is not None:
            lease.timer.cancel()
        if lease.keys:
            self.revision += 1
            for key in sorted(lease.keys):
                self._delete(key)
        return True

    def _arm(self, lease: _Lease) -> None:
        if lease.timer is not None:
            lease.timer.cancel()
        lease.timer = self._loop.call_at(lease.expires_at, self._expire)

    def _touch(self, key: bytes) -> None:
        self._changes.setdefault(key, []).append(self.revision)
        self._changed.set()
        self._changed = asyncio.Event()

    def _put(self, key: bytes, value: bytes, lease_id: int | None) -> None:
        old = self._kv.get(key)
        if old is not None and old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        lease = lease_id or 0
        if lease:
            self._leases[lease].keys.add(key)
        self._kv[key] = KeyValue(key, value, old.create_revision if old else self.revision, self.revision,
                                 old.version + 1 if old else 1, lease)
        self._touch(key)

    def _delete(self, key: bytes) -> None:
        old = self._kv.pop(key, None)
        if old is not None:
            if old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            self._touch(key)

    def grant(self, ttl: int) -> SimpleNamespace:
        self._next_lease += 1
        lease = self._leases[self._next_lease] = _Lease(ttl, self._loop.time() + ttl)
        self._arm(lease)
        return SimpleNamespace(id=self._next_lease, ttl=ttl)

    def keepalive(self, lease_id: int) -> SimpleNamespace:
        lease = self._leases.get(lease_id)
        if lease is None:
            return SimpleNamespace(TTL=0)
        lease.expires_at = self._loop.time() + lease.ttl
        self._arm(lease)
        return SimpleNamespace(TTL=lease.ttl)

    def revoke(self, lease_id: int) -> None:
        if not self._revoke(lease_id):
            raise aetcd.ClientError("etcdserver: requested lease not found")

    def _holds(self, compare: tx.BaseCompare) -> bool:
        kv = self._kv.get(compare.key)
        if isinstance(compare, tx.Value):
            actual: Any = kv.value if kv else None
            return kv is not None and _OPS[compare.op](actual, compare.value)
        actual = 0 if kv is None else {tx.Version: kv.version, tx.Create: kv.create_revision,
                                       tx.Mod: kv.mod_revision}[type(compare)]
        return _OPS[compare.op](actual, int(compare.value))

    def transaction(self, compare: list, success: list, failure: list) -> tuple[bool, list]:
        won = all(self._holds(c) for c in compare)
        ops = success if won else failure
        writes = [op for op in ops if isinstance(op, (tx.Put, tx.Delete))]
        if self.failing and any(op.key.startswith(self._records) for op in writes):
            raise aetcd.ClientError("simulated store outage: writes of runtime records fail")
        if writes:
            self.revision += 1
        responses: list = []
        for op in ops:
            if isinstance(op, tx.Put):
                self._put(op.key, op.value, op.lease)
                responses.append(SimpleNamespace())
            elif isinstance(op, tx.Delete):
                self._delete(op.key)
                responses.append(SimpleNamespace())
            else:
                kv = self._kv.get(op.key)
                responses.append([] if kv is None else [(kv.value, _copy(kv))])
        return won, responses

    def get(self, key: bytes) -> KeyValue | None:
        kv = self._kv.get(key)
        return None if kv is None else _copy(kv)

    def get_range(self, start: bytes, end: bytes) -> list[KeyValue]:
        return [_copy(kv) for key, kv in sorted(self._kv.items()) if start <= key < end]

    async def watch_once(self, key: bytes, timeout: float, start_revision: int) -> SimpleNamespace:
        deadline = self._loop.time() + timeout
        while True:
            self._expire()
            if any(rev >= start_revision for rev in self._changes.get(key, ())):
                return SimpleNamespace(key=key)
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise aetcd.WatchTimeoutError()
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                pass

    def client(self, owner: Owner) -> SimEtcdClient:
        return SimEtcdClient(self, owner)


def _copy(kv: KeyValue) -> KeyValue:
    return KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


class SimEtcdClient:
    """aetcd.Client's surface that Motor uses, over a `SimEtcd`, for one process."""

    channel = None

    def __init__(self, etcd: SimEtcd, owner: Owner) -> None:
        self._etcd, self._owner = etcd, owner
        self.transactions = aetcd.client.Transactions()

    async def get(self, key: bytes):
        await self._etcd.deliver(self._owner, "get")
        return self._etcd.get(key)

    async def get_range(self, start: bytes, end: bytes):
        await self._etcd.deliver(self._owner, "get_range")
        return self._etcd.get_range(start, end)

    async def transaction(self, compare, success=None, failure=None):
        await self._etcd.deliver(self._owner, "transaction")
        return self._etcd.transaction(compare, success or [], failure or [])

    async def lease(self, ttl: int, lease_id=None):
        await self._etcd.deliver(self._owner, "lease grant")
        return self._etcd.grant(ttl)

    async def refresh_lease(self, lease_id: int):
        await self._etcd.deliver(self._owner, "lease keepalive")
        return self._etcd.keepalive(lease_id)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._etcd.deliver(self._owner, "lease revoke")
        self._etcd.revoke(lease_id)

    async def watch_once(self, key: bytes, timeout: float | None = None, start_revision: int | None = None, **_: Any):
        await self._etcd.deliver(self._owner, "watch")
        return await self._etcd.watch_once(key, timeout or 1.0, start_revision or 0)

    async def close(self) -> None:
        pass
