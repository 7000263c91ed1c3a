"""The etcd runtime store beyond the contract both backends share (test_store_contract.py), against
a real etcd server (the session's `etcd_endpoint`, or one of the test's own where it is frozen or
stopped): a restarted controller (a fresh store object), the key layout, unreachable and silent
endpoints, corrupt data written by someone else, and key-prefix isolation. Every test uses its own
prefix.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aetcd
import pytest

from motor.common.ports import free_port
from motor.controller.persistence import EtcdRuntimeStore, StaleWriteError, StoreError, encode_record
from motor.launch.etcd import astart_etcd
from motor.testing.waits import async_wait_for

from .store_support import etcd_store, frozen, record

pytestmark = [pytest.mark.timeout(60), pytest.mark.etcd]


@pytest.fixture
async def raw_etcd(etcd_endpoint: str) -> AsyncIterator[aetcd.Client]:
    """A plain client, to write what no store would (corruption, foreign keys)."""
    host, port = etcd_endpoint.rsplit(":", 1)
    client = aetcd.Client(host=host, port=int(port), timeout=5)
    yield client
    await client.close()


async def test_restarted_controller_reads_what_the_old_one_wrote(etcd_endpoint: str, prefix: str) -> None:
    old = etcd_store(etcd_endpoint, prefix)
    await old.put(record(3, 0), None)
    await old.put(record(3, 1, phase="SCALED_DOWN_RUNNING", dead_committed=(2,)), 0)
    await old.close()

    fresh = etcd_store(etcd_endpoint, prefix)
    try:
        assert await fresh.load_all() == [record(3, 1, phase="SCALED_DOWN_RUNNING", dead_committed=(2,))]
        assert await fresh.load(3) == record(3, 1, phase="SCALED_DOWN_RUNNING", dead_committed=(2,))
        # It can go on from the generation it read, without any state of its own.
        await fresh.put(record(3, 2, phase="RECONFIGURING", dead_committed=(2,)), 1)
    finally:
        await fresh.close()


async def test_description_names_endpoint_and_prefix(etcd_endpoint: str, prefix: str) -> None:
    store = etcd_store(etcd_endpoint, prefix)
    assert store.description == f"etcd {etcd_endpoint} prefix {prefix}"
    await store.close()


async def test_layout_is_record_json_and_generation_key(etcd_endpoint: str, prefix: str,
                                                        raw_etcd: aetcd.Client) -> None:
    store = etcd_store(etcd_endpoint, prefix)
    try:
        await store.put(record(5, 0), None)
        await store.put(record(5, 7), 0)
    finally:
        await store.close()
    rec = await raw_etcd.get(f"{prefix}/instances/5".encode())
    gen = await raw_etcd.get(f"{prefix}/instances/5/generation".encode())
    assert rec is not None and rec.value == encode_record(record(5, 7))
    assert gen is not None and gen.value == b"7"


async def test_unreachable_endpoint_fails_within_deadline(prefix: str) -> None:
    closed = f"127.0.0.1:{free_port()}"
    store = etcd_store(closed, prefix, timeout_sec=2.0)
    try:
        for call in (store.load_all, lambda: store.put(record(), None), lambda: store.delete(1, 0)):
            with pytest.raises(StoreError) as err:
                await call()
            assert closed in str(err.value) and f"{prefix}/instances/" in str(err.value)
            assert not isinstance(err.value, StaleWriteError)
    finally:
        await store.close()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections and never answers (a hung etcd)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def test_silent_endpoint_times_out_at_request_timeout(silent_listener: str, prefix: str) -> None:
    store = etcd_store(silent_listener, prefix, timeout_sec=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as err:
            await store.put(record(), None)
        elapsed_sec = time.monotonic() - started
        assert elapsed_sec > 0.4  # it waited for the request timeout (the test's own timeout bounds it)
        assert silent_listener in str(err.value) and f"{prefix}/instances/1" in str(err.value)
    finally:
        await store.close()


async def test_endpoints_tried_in_order(etcd_endpoint: str, prefix: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    dead = f"127.0.0.1:{free_port()}"
    store = EtcdRuntimeStore([dead, etcd_endpoint], key_prefix=prefix, request_timeout_sec=5.0)
    try:
        await store.put(record(), None)
        assert await store.load_all() == [record()]
    finally:
        await store.close()
    assert f"etcd endpoint {dead} unusable" in caplog.text


async def test_hung_then_dead_server_maps_to_store_errors(tmp_path: Path, prefix: str) -> None:
    # A dedicated server: this test freezes and stops it under a connected store.
    server = await astart_etcd(tmp_path)
    store = etcd_store(server.endpoint, prefix, timeout_sec=1.0)
    try:
        await store.put(record(generation=0), None)

        async with frozen(server.pid):
            # Two calls on the same connection: both fail, neither cancels the other's RPC.
            put_error, load_error = await asyncio.gather(
                store.put(record(generation=1), 0), store.load_all(), return_exceptions=True)
            assert isinstance(put_error, StoreError) and not isinstance(put_error, StaleWriteError), put_error
            assert isinstance(load_error, StoreError), load_error
            message = str(put_error)
            assert server.endpoint in message and "timed out" in message and "outcome unknown" in message
            assert "outcome unknown" not in str(load_error)

        # The frozen server may still apply the write it had buffered: re-read, then go on from there.
        reread = await store.load(1)
        assert reread is not None and reread.generation in (0, 1)
        await store.put(record(generation=reread.generation + 1), reread.generation)

        await server.astop()
        with pytest.raises(StoreError) as err:
            await store.put(record(generation=9), reread.generation + 1)
        assert server.endpoint in str(err.value)
        assert not isinstance(err.value, StaleWriteError)
    finally:
        await store.close()
        await server.astop()


async def test_close_during_a_call_fails_that_call_with_store_error(tmp_path: Path, prefix: str) -> None:
    server = await astart_etcd(tmp_path)
    store = etcd_store(server.endpoint, prefix, timeout_sec=5.0)
    try:
        await store.put(record(generation=0), None)
        async with frozen(server.pid):
            pending = asyncio.create_task(store.load_all())
            # Close only once the call is on the wire to the frozen server (an event, not a sleep).
            await async_wait_for(lambda: store._conn.in_flight and not pending.done(), 10,
                                 "the call on the wire to the frozen server", interval_sec=0.005)
            await store.close()
            # Cut in the RPC ("connection closed during the call") or in its connect: a StoreError
            # either way, never a hang or a bare cancellation.
            with pytest.raises(StoreError, match="closed|failed"):
                await asyncio.wait_for(pending, 5.0)
        with pytest.raises(StoreError, match="closed"):
            await store.load_all()
    finally:
        await store.close()
        await server.astop()


async def _put_raw(client: aetcd.Client, key: str, value: bytes) -> None:
    await client.put(key.encode(), value)


CORRUPTIONS: dict[str, Callable[[aetcd.Client, str], Awaitable[str]]] = {}


def corruption(fn: Callable[[aetcd.Client, str], Awaitable[str]]) -> Callable[[aetcd.Client, str], Awaitable[str]]:
    CORRUPTIONS[fn.__name__] = fn
    return fn


@corruption
async def not_json(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/4", b"{not json")
    await _put_raw(client, f"{prefix}/instances/4/generation", b"0")
    return f"{prefix}/instances/4"


@corruption
async def record_of_another_instance(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/4", encode_record(record(5, 0)))
    await _put_raw(client, f"{prefix}/instances/4/generation", b"0")
    return f"{prefix}/instances/4"


@corruption
async def generation_disagrees(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/4", encode_record(record(4, 2)))
    await _put_raw(client, f"{prefix}/instances/4/generation", b"3")
    return f"{prefix}/instances/4/generation"


@corruption
async def generation_not_a_number(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/4", encode_record(record(4, 2)))
    await _put_raw(client, f"{prefix}/instances/4/generation", b"two")
    return f"{prefix}/instances/4/generation"


@corruption
async def record_without_generation(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/4", encode_record(record(4, 2)))
    return f"{prefix}/instances/4"


@corruption
async def foreign_key(client: aetcd.Client, prefix: str) -> str:
    await _put_raw(client, f"{prefix}/instances/notes", b"hello")
    return f"{prefix}/instances/notes"


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
async def test_unreadable_state_fails_closed_naming_the_key(corrupt: str, etcd_endpoint: str, prefix: str,
                                                            raw_etcd: aetcd.Client) -> None:
    store = etcd_store(etcd_endpoint, prefix)
    try:
        await store.put(record(1, 0), None)  # a good record does not hide a bad one
        key = await CORRUPTIONS[corrupt](raw_etcd, prefix)
        with pytest.raises(StoreError) as err:
            await store.load_all()
        assert repr(key) in str(err.value)
        assert not isinstance(err.value, StaleWriteError)
    finally:
        await store.close()


async def test_load_of_corrupt_record_names_the_key(etcd_endpoint: str, prefix: str,
                                                    raw_etcd: aetcd.Client) -> None:
    key = await not_json(raw_etcd, prefix)
    store = etcd_store(etcd_endpoint, prefix)
    try:
        with pytest.raises(StoreError, match="not JSON") as err:
            await store.load(4)
        assert repr(key) in str(err.value)
    finally:
        await store.close()


async def test_cas_on_half_written_state_is_an_error_not_a_lost_race(etcd_endpoint: str, prefix: str,
                                                                     raw_etcd: aetcd.Client) -> None:
    await _put_raw(raw_etcd, f"{prefix}/instances/4/generation", b"0")
    store = etcd_store(etcd_endpoint, prefix)
    try:
        with pytest.raises(StoreError, match="corrupt runtime state for instance 4") as err:
            await store.put(record(4, 1), 0)
        assert not isinstance(err.value, StaleWriteError)
    finally:
        await store.close()


async def test_key_prefixes_are_isolated(etcd_endpoint: str, prefix: str) -> None:
    # "/x" and "/x2": the second's keys are not under the first's range, and vice versa.
    a = etcd_store(etcd_endpoint, prefix)
    b = etcd_store(etcd_endpoint, prefix + "2")
    try:
        await a.put(record(1, 0, phase="A"), None)
        await b.put(record(1, 0, phase="B"), None)  # same id, no conflict
        await b.put(record(2, 0, phase="B"), None)
        await a.put(record(1, 1, phase="A"), 0)
        assert await a.load_all() == [record(1, 1, phase="A")]
        assert await b.load_all() == [record(1, 0, phase="B"), record(2, 0, phase="B")]
        await b.delete(1, 0)
        assert await a.load_all() == [record(1, 1, phase="A")]
    finally:
        await a.close()
        await b.close()
