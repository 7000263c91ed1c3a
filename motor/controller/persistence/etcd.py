"""The etcd v3 runtime store (through the asyncio `aetcd` client): key layout and CAS transactions."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import aetcd
import aetcd.utils

from motor.common.config.addresses import parse_host_port
from motor.common.config.tls import ClientTlsConfig
from motor.controller.config import StoreConfig
from motor.controller.fencing import Fence, Leadership, NotLeaderError
from motor.controller.persistence.base import check_expected, check_put
from motor.controller.persistence.errors import FencedWriteError, StoreError, stale_write
from motor.controller.persistence.etcd_connection import EtcdConnection
from motor.controller.persistence.records import PersistedInstance, decode_record, encode_record

logger = logging.getLogger(__name__)

_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")
_RECORD_SUFFIX = _DECIMAL
_GENERATION_SUFFIX = re.compile(r"^(0|[1-9][0-9]*)/generation$")


class EtcdRuntimeStore:
    """Runtime records in etcd v3, one compare-and-set transaction per write.

    Layout under `key_prefix` (default "/motor/v1"):

    - `{prefix}/instances/{id}`: the record, canonical JSON (`encode_record`);
    - `{prefix}/instances/{id}/generation`: the record's generation as a decimal string.

    CAS mechanism: each put/delete is one etcd transaction whose compare is on the generation key's
    *value* (`== str(expected)`), or on both keys' version == 0 (key absent) for a first write; the
    success branch writes (or deletes) both keys together, the failure branch reads the stored
    generation for the error. The check and the write happen in one raft entry, so it is atomic across
    processes, and it compares exactly the generation the caller states. Comparing the record key's
    mod_revision instead would need a revision remembered per store object from its last read: a
    fresh store (a restarted controller) or a second store object would then CAS against its own
    cache rather than against the generation the interface talks about. Keeping the generation in
    its own key costs one extra small key, and a single range read of `{prefix}/instances/` returns
    both keys at one revision, so `load_all` cross-checks them and refuses any disagreement.

    Prefixes must not nest (`/a` and `/a/instances/1`): the outer one would see foreign keys under
    its range and refuse them as corrupt.

    Fencing: with a `Leadership` (Controller replicas electing a leader), every put and delete is
    first checked against this replica's fence and its transaction also compares the leader key's
    create revision with the fence's term, so the write lands only while this replica's term still
    holds in etcd; a lost compare there is `FencedWriteError` and loses the fence (the replica
    stops acting). Reads are not fenced.

    Connection (`EtcdConnection`): made on first use, endpoints probed in order, one client used
    until a call fails; a failed call is not retried elsewhere (a timed-out write's outcome is
    unknown, so the caller re-reads). Every public call is bounded by `request_timeout_sec`.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        key_prefix: str = "/motor/v1",
        request_timeout_sec: float = 5.0,
        tls: ClientTlsConfig | None = None,
        leadership: Leadership | None = None,
        client_factory: Callable[[str, int], aetcd.Client] | None = None,
    ) -> None:
        """`client_factory`: makes the etcd clients of this store's connections (`EtcdConnection`)."""
        self._leadership = leadership
        if isinstance(endpoints, str):
            raise ValueError(f"endpoints must be a list of host:port, got the string {endpoints!r}")
        if not endpoints:
            raise ValueError("EtcdRuntimeStore needs at least one endpoint (host:port)")
        self._endpoints = [(ep, *parse_host_port(ep)) for ep in endpoints]
        if not key_prefix.startswith("/") or key_prefix.endswith("/") or len(key_prefix) < 2:
            raise ValueError(f"key_prefix {key_prefix!r} must start with '/' and not end with '/'")
        if not request_timeout_sec > 0:
            raise ValueError(f"request_timeout_sec {request_timeout_sec!r} must be > 0")
        self._prefix = key_prefix
        self._instances_prefix = f"{key_prefix}/instances/"
        self.description = (f"etcd {','.join(ep for ep, _, _ in self._endpoints)} prefix {key_prefix}"
                            f"{' over TLS' if tls else ''}")
        self._tls = tls
        self._client_factory = client_factory
        self._conn = EtcdConnection(self._endpoints, prefix=key_prefix, timeout_sec=float(request_timeout_sec), tls=tls,
                                    client_factory=client_factory)

    @classmethod
    def from_config(cls, config: StoreConfig, tls: ClientTlsConfig | None = None,
                    leadership: Leadership | None = None) -> EtcdRuntimeStore:
        """`tls` (the store's own, or the process's `security`) wins over config.tls when given;
        `leadership`: every write fenced by this replica's term (Controller replicas electing a leader)."""
        return cls(config.etcd_endpoints, key_prefix=config.key_prefix,
                   request_timeout_sec=config.request_timeout_sec, tls=tls or config.tls, leadership=leadership)

    def connection(self) -> EtcdConnection:
        """A connection of its own to the same etcd (endpoints, TLS, timeout): the leader election's."""
        return EtcdConnection(self._endpoints, prefix=self._prefix, timeout_sec=self._conn.timeout_sec, tls=self._tls,
                              client_factory=self._client_factory)

    @property
    def leader_key(self) -> str:
        return f"{self._prefix}/leader"

    def _fence(self, what: str) -> Fence | None:
        if self._leadership is None:
            return None
        try:
            return self._leadership.check(what, kind="store")
        except NotLeaderError as exc:
            raise FencedWriteError(str(exc)) from None

    def _fenced_out(self, fence: Fence | None, what: str, responses: list[Any]) -> FencedWriteError | None:
        """The error when a failed transaction's leader-key compare is what failed (the fence is lost)."""
        if fence is None or fence.key is None:
            return None
        leader_kvs = responses[2]
        revision = leader_kvs[0][1].create_revision if leader_kvs else None
        if revision == fence.term:
            return None
        reason = (f"etcd refused {what}: leader key {fence.key.decode()!r} is "
                  f"{'gone' if revision is None else f'of term {revision}'}, not term {fence.term}")
        fence.lose(reason)
        return FencedWriteError(reason)

    @property
    def key_prefix(self) -> str:
        return self._prefix

    def record_key(self, instance_id: int) -> str:
        return f"{self._instances_prefix}{instance_id}"

    def generation_key(self, instance_id: int) -> str:
        return f"{self._instances_prefix}{instance_id}/generation"

    # -- operations ---------------------------------------------------------------------------------

    async def load_all(self) -> list[PersistedInstance]:
        """Every record, by instance id; StoreError (fail closed) on any record it cannot read."""
        base = self._instances_prefix
        base_bytes = base.encode()

        async def op(client: aetcd.Client) -> Any:
            return await client.get_range(base_bytes, aetcd.utils.prefix_range_end(base_bytes))

        result = await self._conn.call("load_all", base, op, write=False)
        records: dict[int, tuple[str, bytes]] = {}
        generations: dict[int, tuple[str, bytes]] = {}
        for kv in result:
            key = kv.key.decode("utf-8", "replace")
            suffix = key[len(base):]
            if (m := _RECORD_SUFFIX.match(suffix)) is not None:
                records[int(m.group(1))] = (key, kv.value)
            elif (m := _GENERATION_SUFFIX.match(suffix)) is not None:
                generations[int(m.group(1))] = (key, kv.value)
            else:
                raise StoreError(f"unexpected key {key!r} under {base!r} (not a runtime record)")
        for iid, (key, _) in generations.items():
            if iid not in records:
                raise StoreError(f"corrupt runtime state: {key!r} exists without record {self.record_key(iid)!r}")
        loaded = []
        for iid in sorted(records):
            key, value = records[iid]
            record = decode_record(value, key=key)
            if record.instance_id != iid:
                raise StoreError(f"corrupt runtime record under key {key!r}: "
                                 f"instance_id {record.instance_id} does not match the key")
            gen_entry = generations.get(iid)
            if gen_entry is None:
                raise StoreError(f"corrupt runtime state: record {key!r} has no {self.generation_key(iid)!r}")
            stored_gen = _parse_generation(gen_entry[1], key=gen_entry[0])
            if stored_gen != record.generation:
                raise StoreError(f"corrupt runtime state: {gen_entry[0]!r} holds {stored_gen} but record "
                                 f"{key!r} has generation {record.generation}")
            loaded.append(record)
        return loaded

    async def load(self, instance_id: int) -> PersistedInstance | None:
        """The stored record of one instance, or None (e.g. to re-read after an ambiguous write)."""
        key = self.record_key(instance_id)

        async def op(client: aetcd.Client) -> Any:
            return await client.get(key.encode())

        got = await self._conn.call("get", key, op, write=False)
        if got is None:
            return None
        record = decode_record(got.value, key=key)
        if record.instance_id != instance_id:
            raise StoreError(f"corrupt runtime record under key {key!r}: "
                             f"instance_id {record.instance_id} does not match the key")
        return record

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        record = check_put(record, expected_generation)
        iid = record.instance_id
        rec_key, gen_key = self.record_key(iid).encode(), self.generation_key(iid).encode()
        value = encode_record(record)
        fence = self._fence(f"put of instance {iid}")

        async def op(client: aetcd.Client) -> tuple[bool, list[Any]]:
            tx = client.transactions
            if expected_generation is None:
                compare = [tx.version(gen_key) == 0, tx.version(rec_key) == 0]
            else:
                compare = [tx.value(gen_key) == str(expected_generation).encode(), tx.version(rec_key) > 0]
            return await client.transaction(
                compare=compare + _fence_compare(tx, fence),
                success=[tx.put(rec_key, value), tx.put(gen_key, str(record.generation).encode())],
                failure=[tx.get(gen_key), tx.get(rec_key), *_fence_read(tx, fence)],
            )

        succeeded, responses = await self._conn.call(f"put (instance {iid})", rec_key.decode(), op, write=True)
        if not succeeded:
            raise self._fenced_out(fence, f"put of instance {iid}", responses) or \
                self._lost(iid, "put", expected_generation, responses)
        logger.debug("instance %d: persisted generation %d (phase %s)", iid, record.generation, record.phase)

    async def delete(self, instance_id: int, expected_generation: int) -> None:
        check_expected(instance_id, expected_generation, allow_none=False)
        rec_key, gen_key = self.record_key(instance_id).encode(), self.generation_key(instance_id).encode()
        fence = self._fence(f"delete of instance {instance_id}")

        async def op(client: aetcd.Client) -> tuple[bool, list[Any]]:
            tx = client.transactions
            # Exact keys only: a prefix delete of ".../instances/1" would also take instance 10.
            return await client.transaction(
                compare=[tx.value(gen_key) == str(expected_generation).encode(), tx.version(rec_key) > 0,
                         *_fence_compare(tx, fence)],
                success=[tx.delete(rec_key), tx.delete(gen_key)],
                failure=[tx.get(gen_key), tx.get(rec_key), *_fence_read(tx, fence)],
            )

        succeeded, responses = await self._conn.call(f"delete (instance {instance_id})", rec_key.decode(), op,
                                                     write=True)
        if not succeeded:
            raise self._fenced_out(fence, f"delete of instance {instance_id}", responses) or \
                self._lost(instance_id, "delete", expected_generation, responses)
        logger.debug("instance %d: deleted record at generation %d", instance_id, expected_generation)

    def _lost(self, instance_id: int, op: str, expected: int | None, responses: list[Any]) -> StoreError:
        """The error for a failed compare, from the failure branch's reads of both keys."""
        gen_kvs, rec_kvs = responses[0], responses[1]
        gen_key = self.generation_key(instance_id)
        actual = _parse_generation(gen_kvs[0][0], key=gen_key) if gen_kvs else None
        if (actual is None) != (not rec_kvs):
            # The compare failed because the two keys disagree, not because another writer won.
            return StoreError(f"corrupt runtime state for instance {instance_id}: "
                              f"{self.record_key(instance_id)!r} {'exists' if rec_kvs else 'is missing'} but "
                              f"{gen_key!r} {'exists' if actual is not None else 'is missing'}")
        return stale_write(instance_id, op, expected, actual)

    async def close(self) -> None:
        """Closes every connection now; calls still running fail with StoreError. Idempotent."""
        await self._conn.close()


def _fence_compare(tx: Any, fence: Fence | None) -> list[Any]:
    """The write lands only while the leader key is the one this replica's term created."""
    return [tx.create(fence.key) == fence.term] if fence is not None and fence.key is not None else []


def _fence_read(tx: Any, fence: Fence | None) -> list[Any]:
    return [tx.get(fence.key)] if fence is not None and fence.key is not None else []


def _parse_generation(value: bytes, *, key: str) -> int:
    text = value.decode("ascii", "replace")
    if _DECIMAL.match(text) is None:
        raise StoreError(f"corrupt generation under key {key!r}: {text[:40]!r} is not a decimal int")
    return int(text)

