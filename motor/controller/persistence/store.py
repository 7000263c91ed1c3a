"""Persistence of the controller's desired state (RFC §5 "Controller 重启").

Only what a restart needs is persisted, per instance: phase, generation, original_dp_ranks,
dead_committed, fallback_strategy, and the topology needed to re-assemble the instance. Observed
state (engine statuses, fault evidence, timelines) is rebuilt after a restart, never persisted.

Every write is a compare-and-set on `generation`: a writer states the generation it last saw, and the
write succeeds only if the stored record still has it. A stale writer gets `StaleWriteError` and
cannot overwrite newer state.

The store checks exactly "stored generation == expected" at the moment of the write, nothing more.
It does not require the new record's generation to be larger (only never smaller): callers that
want every other writer excluded bump the generation on each write (FtRuntimeStore does).

Backends (same semantics, same record encoding, both exercised by one test suite):

- `MemoryRuntimeStore`: the embedded default when no etcd endpoint is configured; state is lost on
  restart.
- `EtcdRuntimeStore`: etcd v3 through the asyncio `aetcd` client.

Reading fails closed: a record that cannot be decoded raises `StoreError` naming its key, from
`load_all` too. A controller must not start on state it cannot read: skipping a record would make
the instance look brand new and let the controller re-drive a scale-down that the RFC's restart rule
forbids ("重启后不重放 apply"); an operator has to repair or delete the key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import aetcd
import aetcd.utils
import grpc

from motor.common.config import StoreConfig, parse_host_port

logger = logging.getLogger(__name__)

T = TypeVar("T")


class StoreError(RuntimeError):
    """The backend failed (unreachable, timed out, corrupt data); the message names the key."""


class StaleWriteError(StoreError):
    """A compare-and-set lost: the stored generation is not the one the writer expected."""

    def __init__(
        self,
        message: str,
        *,
        instance_id: int | None = None,
        expected_generation: int | None = None,
        actual_generation: int | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        # None means "no record" on either side.
        self.expected_generation = expected_generation
        self.actual_generation = actual_generation


@dataclass(frozen=True)
class PersistedInstance:
    instance_id: int
    phase: str
    generation: int
    original_dp_ranks: tuple[int, ...]
    dead_committed: tuple[int, ...]
    fallback_strategy: str
    # Serialized motor.v1.Instance (authoritative topology); opaque to the store.
    topology: bytes


class RuntimeStore(Protocol):
    """Backend interface; implementations: MemoryRuntimeStore (default) and EtcdRuntimeStore."""

    description: str

    async def load_all(self) -> list[PersistedInstance]: ...

    async def load(self, instance_id: int) -> PersistedInstance | None: ...

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        """Writes `record` if the stored generation equals `expected_generation` (None: no record yet)."""

    async def delete(self, instance_id: int, expected_generation: int) -> None: ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------------------------------
# Record encoding (shared by both backends so they behave identically, including on bad records)

RECORD_SCHEMA_VERSION = 1

_RECORD_FIELDS = frozenset({
    "schema_version", "instance_id", "phase", "generation", "original_dp_ranks", "dead_committed",
    "fallback_strategy", "topology_b64",
})


def _is_int(value: object) -> bool:
    # bool is an int subclass; True as a generation is always a bug.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_record(record: PersistedInstance) -> PersistedInstance:
    """The record with rank lists as tuples; ValueError (a caller bug, not a backend failure) otherwise."""
    iid = record.instance_id
    if not _is_int(iid) or iid < 0:
        raise ValueError(f"instance_id {iid!r} must be an int >= 0")
    if not _is_int(record.generation) or record.generation < 0:
        raise ValueError(f"instance {iid}: generation {record.generation!r} must be an int >= 0")
    for name in ("phase", "fallback_strategy"):
        if not isinstance(getattr(record, name), str):
            raise ValueError(f"instance {iid}: {name} {getattr(record, name)!r} must be a str")
    for name in ("original_dp_ranks", "dead_committed"):
        ranks = getattr(record, name)
        if isinstance(ranks, (str, bytes)) or not all(_is_int(r) for r in ranks):
            raise ValueError(f"instance {iid}: {name} {ranks!r} must be a sequence of int ranks")
    if not isinstance(record.topology, (bytes, bytearray)):
        raise ValueError(f"instance {iid}: topology must be bytes, got {type(record.topology).__name__}")
    return PersistedInstance(
        instance_id=iid,
        phase=record.phase,
        generation=record.generation,
        original_dp_ranks=tuple(record.original_dp_ranks),
        dead_committed=tuple(record.dead_committed),
        fallback_strategy=record.fallback_strategy,
        topology=bytes(record.topology),
    )


def _check_expected(instance_id: int, expected_generation: int | None, *, allow_none: bool) -> None:
    if expected_generation is None and allow_none:
        return
    if not _is_int(expected_generation) or expected_generation < 0:  # type: ignore[operator]
        raise ValueError(f"instance {instance_id}: expected_generation {expected_generation!r} "
                         f"must be an int >= 0{' or None' if allow_none else ''}")


def encode_record(record: PersistedInstance) -> bytes:
    """Canonical JSON of a record (topology as base64)."""
    record = _check_record(record)
    doc = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "instance_id": record.instance_id,
        "phase": record.phase,
        "generation": record.generation,
        "original_dp_ranks": list(record.original_dp_ranks),
        "dead_committed": list(record.dead_committed),
        "fallback_strategy": record.fallback_strategy,
        "topology_b64": base64.b64encode(record.topology).decode("ascii"),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_record(data: bytes, *, key: str) -> PersistedInstance:
    """The record stored under `key`; StoreError naming the key when it is not a valid record."""
    def corrupt(reason: str) -> StoreError:
        return StoreError(f"corrupt runtime record under key {key!r}: {reason}")

    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise corrupt(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise corrupt(f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema_version") != RECORD_SCHEMA_VERSION:
        raise corrupt(f"schema_version {doc.get('schema_version')!r} is not {RECORD_SCHEMA_VERSION}")
    missing = sorted(_RECORD_FIELDS - doc.keys())
    if missing:
        raise corrupt(f"missing fields {missing}")
    unknown = sorted(doc.keys() - _RECORD_FIELDS)
    if unknown:
        raise corrupt(f"unknown fields {unknown}")
    for name in ("instance_id", "generation"):
        if not _is_int(doc[name]) or doc[name] < 0:
            raise corrupt(f"{name} {doc[name]!r} is not an int >= 0")
    for name in ("phase", "fallback_strategy", "topology_b64"):
        if not isinstance(doc[name], str):
            raise corrupt(f"{name} {doc[name]!r} is not a string")
    for name in ("original_dp_ranks", "dead_committed"):
        if not isinstance(doc[name], list) or not all(_is_int(r) for r in doc[name]):
            raise corrupt(f"{name} {doc[name]!r} is not a list of ints")
    try:
        topology = base64.b64decode(doc["topology_b64"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise corrupt(f"topology_b64 is not base64 ({exc})") from None
    return PersistedInstance(
        instance_id=doc["instance_id"],
        phase=doc["phase"],
        generation=doc["generation"],
        original_dp_ranks=tuple(doc["original_dp_ranks"]),
        dead_committed=tuple(doc["dead_committed"]),
        fallback_strategy=doc["fallback_strategy"],
        topology=topology,
    )


def _stale(instance_id: int, op: str, expected: int | None, actual: int | None) -> StaleWriteError:
    def show(gen: int | None) -> str:
        return "no record" if gen is None else f"generation {gen}"

    return StaleWriteError(
        f"instance {instance_id}: stale {op} refused: expected {show(expected)}, stored {show(actual)}",
        instance_id=instance_id, expected_generation=expected, actual_generation=actual,
    )


# --------------------------------------------------------------------------------------------------
# In-memory backend


class MemoryRuntimeStore:
    """Process-local store with the same CAS semantics and record encoding as etcd.

    Records are kept encoded, so a record the etcd backend would refuse is refused here too, and
    readers get fresh objects. Each method runs without awaiting, so on one event loop every
    operation is atomic with respect to the others.
    """

    description = "in-memory (state is lost on restart)"

    def __init__(self) -> None:
        self._records: dict[int, tuple[int, bytes]] = {}
        self._closed = False

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise StoreError(f"in-memory store closed ({what})")

    async def load_all(self) -> list[PersistedInstance]:
        self._check_open("load_all")
        return [decode_record(data, key=f"memory:instances/{iid}")
                for iid, (_, data) in sorted(self._records.items())]

    async def load(self, instance_id: int) -> PersistedInstance | None:
        """The stored record of one instance, or None."""
        self._check_open(f"load instance {instance_id}")
        entry = self._records.get(instance_id)
        return None if entry is None else decode_record(entry[1], key=f"memory:instances/{instance_id}")

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        record = _check_record(record)
        iid = record.instance_id
        _check_expected(iid, expected_generation, allow_none=True)
        _check_not_backwards(record, expected_generation)
        self._check_open(f"put instance {iid}")
        entry = self._records.get(iid)
        actual = None if entry is None else entry[0]
        if actual != expected_generation:
            raise _stale(iid, "put", expected_generation, actual)
        self._records[iid] = (record.generation, encode_record(record))

    async def delete(self, instance_id: int, expected_generation: int) -> None:
        _check_expected(instance_id, expected_generation, allow_none=False)
        self._check_open(f"delete instance {instance_id}")
        entry = self._records.get(instance_id)
        actual = None if entry is None else entry[0]
        if actual != expected_generation:
            raise _stale(instance_id, "delete", expected_generation, actual)
        del self._records[instance_id]

    async def close(self) -> None:
        self._closed = True


def _check_not_backwards(record: PersistedInstance, expected_generation: int | None) -> None:
    if expected_generation is not None and record.generation < expected_generation:
        raise ValueError(f"instance {record.instance_id}: generation {record.generation} would go back "
                         f"from expected generation {expected_generation}")


# --------------------------------------------------------------------------------------------------
# etcd backend

# A single etcd response holds every record in load_all; gRPC's 4 MiB default would cap the number
# of instances far below what etcd itself accepts.
_MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_CLOSE_TIMEOUT_SEC = 1.0
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

    Connection: the client is made on first use (on the caller's event loop). Endpoints are probed
    in order with a linearizable read, each given an equal share of what remains of the call's
    deadline; the first that answers is used until a call fails, after which the next call probes
    again from the first endpoint. A failed call is not retried on another endpoint: a write that
    timed out may have been applied, so the error says its outcome is unknown and the caller re-reads.
    Every public call (probe included) is bounded by `request_timeout_sec`.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        key_prefix: str = "/motor/v1",
        request_timeout_sec: float = 5.0,
    ) -> None:
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
        self._timeout_sec = float(request_timeout_sec)
        self.description = f"etcd {','.join(ep for ep, _, _ in self._endpoints)} prefix {key_prefix}"
        self._client: aetcd.Client | None = None
        self._endpoint: str | None = None
        self._connect_lock = asyncio.Lock()
        # Failed clients still closing (after a grace for calls running on them).
        self._retiring: dict[asyncio.Task[None], aetcd.Client] = {}
        self._closed = False

    @classmethod
    def from_config(cls, config: StoreConfig) -> EtcdRuntimeStore:
        return cls(config.etcd_endpoints, key_prefix=config.key_prefix,
                   request_timeout_sec=config.request_timeout_sec)

    @property
    def key_prefix(self) -> str:
        return self._prefix

    def record_key(self, instance_id: int) -> str:
        return f"{self._instances_prefix}{instance_id}"

    def generation_key(self, instance_id: int) -> str:
        return f"{self._instances_prefix}{instance_id}/generation"

    # -- connection ---------------------------------------------------------------------------------

    def _new_client(self, host: str, port: int) -> aetcd.Client:
        return aetcd.Client(host=host, port=port, timeout=self._timeout_sec,  # type: ignore[arg-type]
                            options={"grpc.max_receive_message_length": _MAX_RECEIVE_BYTES})

    async def _connect(self, deadline: float, key: str) -> tuple[aetcd.Client, str]:
        loop = asyncio.get_running_loop()
        async with self._connect_lock:
            if self._client is not None and self._endpoint is not None:
                return self._client, self._endpoint
            failures = []
            for index, (endpoint, host, port) in enumerate(self._endpoints):
                share_sec = (deadline - loop.time()) / (len(self._endpoints) - index)
                if share_sec <= 0:
                    failures.append(f"{endpoint}: not tried, deadline reached")
                    continue
                client = self._new_client(host, port)
                try:
                    # Linearizable read: answers only when this member can reach a raft leader.
                    await asyncio.wait_for(client.get(self._prefix.encode()), share_sec)
                except (TimeoutError, aetcd.ClientError, grpc.RpcError, OSError) as exc:
                    failures.append(f"{endpoint}: {_describe(exc, share_sec)}")
                    logger.warning("etcd endpoint %s unusable (%s)%s", endpoint, _describe(exc, share_sec),
                                   "; trying the next one" if index + 1 < len(self._endpoints) else "")
                    await _close_quietly(client)
                    continue
                except BaseException:
                    # Cancelled (the call's deadline): close without awaiting in a cancelled task.
                    self._close_later(client, grace_sec=None)
                    raise
                if self._closed:
                    await _close_quietly(client)
                    raise StoreError(f"etcd store closed while connecting (key {key!r})")
                self._client, self._endpoint = client, endpoint
                logger.info("runtime store connected to etcd %s (prefix %s)", endpoint, self._prefix)
                return client, endpoint
            raise StoreError(f"no etcd endpoint reachable for key {key!r}: {'; '.join(failures)}")

    def _retire_client(self, client: aetcd.Client) -> None:
        """Stops using `client` after it failed; closes it once calls still running on it are done.

        Other coroutines may be mid-call on the same channel: closing it at once would cancel their
        RPCs. They are all bounded by request_timeout_sec, so that is the grace given.
        """
        if self._client is client:
            self._client, self._endpoint = None, None
        self._close_later(client, grace_sec=self._timeout_sec)

    def _close_later(self, client: aetcd.Client, grace_sec: float | None) -> None:
        if any(c is client for c in self._retiring.values()):
            return
        task = asyncio.get_running_loop().create_task(_close_quietly(client, grace_sec=grace_sec))
        # The loop keeps only weak references to tasks: hold it until done (close() cancels it).
        self._retiring[task] = client
        task.add_done_callback(lambda t: self._retiring.pop(t, None))

    async def _call(self, what: str, key: str, op: Callable[[aetcd.Client], Awaitable[T]], *,
                    write: bool) -> T:
        """Runs `op` against a connected client within request_timeout_sec, mapping failures to StoreError."""
        if self._closed:
            raise StoreError(f"etcd store closed ({what} of key {key!r})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_sec
        unknown = " (outcome unknown: re-read before retrying)" if write else ""
        client: aetcd.Client | None = None
        endpoint: str | None = None

        async def run() -> T:
            nonlocal client, endpoint
            client, endpoint = await self._connect(deadline, key)
            return await op(client)

        try:
            return await asyncio.wait_for(run(), self._timeout_sec)
        except StoreError:
            raise
        except TimeoutError:
            if client is not None:
                self._retire_client(client)
            if endpoint is None:
                tried = ", ".join(ep for ep, _, _ in self._endpoints)
                raise StoreError(f"{what} of key {key!r}: no etcd endpoint answered within "
                                 f"{self._timeout_sec:g}s (tried {tried})") from None
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint} timed out after "
                             f"{self._timeout_sec:g}s{unknown}") from None
        except (aetcd.ClientError, grpc.RpcError, OSError) as exc:
            if client is not None:
                self._retire_client(client)
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint} failed: "
                             f"{_describe(exc, self._timeout_sec)}{unknown}") from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Nobody cancelled this task: grpc reports an RPC cut by its channel closing (close()
            # while the call ran) as CancelledError, which must not pass for a cancellation.
            raise StoreError(f"{what} of key {key!r} at etcd {endpoint}: connection closed during the call"
                             f"{unknown}") from None

    # -- operations ---------------------------------------------------------------------------------

    async def load_all(self) -> list[PersistedInstance]:
        """Every record, by instance id; StoreError (fail closed) on any record it cannot read."""
        base = self._instances_prefix
        base_bytes = base.encode()

        async def op(client: aetcd.Client) -> Any:
            return await client.get_range(base_bytes, aetcd.utils.prefix_range_end(base_bytes))

        result = await self._call("load_all", base, op, write=False)
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

        got = await self._call("get", key, op, write=False)
        if got is None:
            return None
        record = decode_record(got.value, key=key)
        if record.instance_id != instance_id:
            raise StoreError(f"corrupt runtime record under key {key!r}: "
                             f"instance_id {record.instance_id} does not match the key")
        return record

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        record = _check_record(record)
        iid = record.instance_id
        _check_expected(iid, expected_generation, allow_none=True)
        _check_not_backwards(record, expected_generation)
        rec_key, gen_key = self.record_key(iid).encode(), self.generation_key(iid).encode()
        value = encode_record(record)

        async def op(client: aetcd.Client) -> tuple[bool, list[Any]]:
            tx = client.transactions
            if expected_generation is None:
                compare = [tx.version(gen_key) == 0, tx.version(rec_key) == 0]
            else:
                compare = [tx.value(gen_key) == str(expected_generation).encode(), tx.version(rec_key) > 0]
            return await client.transaction(
                compare=compare,
                success=[tx.put(rec_key, value), tx.put(gen_key, str(record.generation).encode())],
                failure=[tx.get(gen_key), tx.get(rec_key)],
            )

        succeeded, responses = await self._call(f"put (instance {iid})", rec_key.decode(), op, write=True)
        if not succeeded:
            raise self._lost(iid, "put", expected_generation, responses)
        logger.debug("instance %d: persisted generation %d (phase %s)", iid, record.generation, record.phase)

    async def delete(self, instance_id: int, expected_generation: int) -> None:
        _check_expected(instance_id, expected_generation, allow_none=False)
        rec_key, gen_key = self.record_key(instance_id).encode(), self.generation_key(instance_id).encode()

        async def op(client: aetcd.Client) -> tuple[bool, list[Any]]:
            tx = client.transactions
            # Exact keys only: a prefix delete of ".../instances/1" would also take instance 10.
            return await client.transaction(
                compare=[tx.value(gen_key) == str(expected_generation).encode(), tx.version(rec_key) > 0],
                success=[tx.delete(rec_key), tx.delete(gen_key)],
                failure=[tx.get(gen_key), tx.get(rec_key)],
            )

        succeeded, responses = await self._call(f"delete (instance {instance_id})", rec_key.decode(), op,
                                                write=True)
        if not succeeded:
            raise self._lost(instance_id, "delete", expected_generation, responses)
        logger.debug("instance %d: deleted record at generation %d", instance_id, expected_generation)

    def _lost(self, instance_id: int, op: str, expected: int | None, responses: list[Any]) -> StoreError:
        """The error for a failed compare, from the failure branch's reads of both keys."""
        gen_kvs, rec_kvs = responses
        gen_key = self.generation_key(instance_id)
        actual = _parse_generation(gen_kvs[0][0], key=gen_key) if gen_kvs else None
        if (actual is None) != (not rec_kvs):
            # The compare failed because the two keys disagree, not because another writer won.
            return StoreError(f"corrupt runtime state for instance {instance_id}: "
                              f"{self.record_key(instance_id)!r} {'exists' if rec_kvs else 'is missing'} but "
                              f"{gen_key!r} {'exists' if actual is not None else 'is missing'}")
        return _stale(instance_id, op, expected, actual)

    async def close(self) -> None:
        """Closes every connection now; calls still running fail with StoreError. Idempotent."""
        self._closed = True
        clients = list(self._retiring.values())
        for task in list(self._retiring):
            task.cancel()
        if self._client is not None:
            clients.append(self._client)
        self._client, self._endpoint = None, None
        for client in clients:
            await _close_quietly(client)


def _parse_generation(value: bytes, *, key: str) -> int:
    text = value.decode("ascii", "replace")
    if _DECIMAL.match(text) is None:
        raise StoreError(f"corrupt generation under key {key!r}: {text[:40]!r} is not a decimal int")
    return int(text)


def _describe(exc: BaseException, timeout_sec: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_sec:.3g}s"
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


async def _close_quietly(client: aetcd.Client, grace_sec: float | None = None) -> None:
    try:
        if grace_sec and client.channel is not None:
            # New calls are refused at once; running ones get up to grace_sec to finish.
            await asyncio.wait_for(client.channel.close(grace_sec), grace_sec + _CLOSE_TIMEOUT_SEC)
        await asyncio.wait_for(client.close(), _CLOSE_TIMEOUT_SEC)
    except Exception as exc:  # a broken channel must not mask the error being reported
        logger.debug("closing etcd client failed: %s", exc)


# --------------------------------------------------------------------------------------------------


def open_runtime_store(config: StoreConfig) -> RuntimeStore:
    """The store `config` asks for: etcd when endpoints are configured, else in memory (logged)."""
    if not config.etcd_endpoints:
        logger.warning("no etcd endpoints configured: using in-memory store; state is lost on restart")
        return MemoryRuntimeStore()
    store = EtcdRuntimeStore.from_config(config)
    logger.info("runtime store: %s (request timeout %gs)", store.description, config.request_timeout_sec)
    return store
