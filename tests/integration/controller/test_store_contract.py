"""The RuntimeStore contract, run once over both backends: the in-memory default and etcd (the
session's `etcd_endpoint` server, each test under its own prefix), so the two cannot drift.

Compare-and-set on generation for put and delete, what a stale writer is told, reads that are
sorted and normalized, caller errors refused before any I/O, a closed store, and writers racing
on one store object and on separate ones (on etcd: separate gRPC channels, a real race).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable

import pytest

from motor.controller.persistence import MemoryRuntimeStore, RuntimeStore, StaleWriteError, StoreError

from .store_support import etcd_store, record

pytestmark = [pytest.mark.timeout(60)]

StoreFactory = Callable[[], RuntimeStore]


@pytest.fixture
async def stores() -> AsyncIterator[list[RuntimeStore]]:
    """Collects stores a test opens and closes them at the end."""
    opened: list[RuntimeStore] = []
    yield opened
    for store in opened:
        await store.close()


@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
def new_store(request: pytest.FixtureRequest, prefix: str, stores: list[RuntimeStore]) -> StoreFactory:
    """Opens stores of one backend that share state (etcd: same prefix; memory: same object)."""
    if request.param == "memory":
        shared = MemoryRuntimeStore()
        stores.append(shared)
        return lambda: shared
    endpoint = request.getfixturevalue("etcd_endpoint")

    def make() -> RuntimeStore:
        store = etcd_store(endpoint, prefix)
        stores.append(store)
        return store

    return make


async def test_first_write_needs_no_record(new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(generation=0), None)
    assert await store.load_all() == [record(generation=0)]
    with pytest.raises(StaleWriteError) as err:
        await store.put(record(generation=0, phase="DECIDING"), None)
    assert (err.value.instance_id, err.value.expected_generation, err.value.actual_generation) == (1, None, 0)
    assert "instance 1: stale put refused: expected no record, stored generation 0" in str(err.value)


async def test_expected_generation_without_record_is_stale(new_store: StoreFactory) -> None:
    store = new_store()
    with pytest.raises(StaleWriteError) as err:
        await store.put(record(generation=4), 3)
    assert (err.value.expected_generation, err.value.actual_generation) == (3, None)
    assert "expected generation 3, stored no record" in str(err.value)
    assert await store.load_all() == []


async def test_stale_generation_refused_newer_state_kept(new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(generation=0), None)
    await store.put(record(generation=1, phase="DECIDING"), 0)
    await store.put(record(generation=2, phase="SCALING_DOWN", dead_committed=(3,)), 1)
    with pytest.raises(StaleWriteError) as err:
        await store.put(record(generation=1, phase="RECONFIGURING"), 0)
    assert (err.value.instance_id, err.value.expected_generation, err.value.actual_generation) == (1, 0, 2)
    assert "expected generation 0, stored generation 2" in str(err.value)
    assert await store.load_all() == [record(generation=2, phase="SCALING_DOWN", dead_committed=(3,))]


async def test_load_all_returns_latest_per_instance_sorted(new_store: StoreFactory) -> None:
    store = new_store()
    # 1 and 10 share a key prefix in etcd: neither may shadow or delete the other.
    for iid in (10, 1, 2):
        await store.put(record(iid, 0), None)
    await store.put(record(1, 1, phase="DECIDING"), 0)
    await store.put(record(10, 1, topology=b""), 0)
    assert await store.load_all() == [record(1, 1, phase="DECIDING"), record(2, 0), record(10, 1, topology=b"")]
    assert await store.load(1) == record(1, 1, phase="DECIDING")
    assert await store.load(99) is None
    await store.delete(1, 1)
    assert [r.instance_id for r in await store.load_all()] == [2, 10]


async def test_delete_is_compare_and_set(new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(generation=0), None)
    await store.put(record(generation=1), 0)
    with pytest.raises(StaleWriteError) as err:
        await store.delete(1, 0)
    assert (err.value.expected_generation, err.value.actual_generation) == (0, 1)
    assert "stale delete" in str(err.value)
    await store.delete(1, 1)
    assert await store.load_all() == []
    with pytest.raises(StaleWriteError) as err:
        await store.delete(1, 1)
    assert err.value.actual_generation is None
    # After a delete the instance starts afresh.
    await store.put(record(generation=0), None)
    assert await store.load_all() == [record(generation=0)]


async def test_records_come_back_normalized_and_equal(new_store: StoreFactory) -> None:
    store = new_store()
    # Lists in, tuples out: both backends hand back what the codec decodes.
    await store.put(record(original_dp_ranks=[0, 1], dead_committed=[1], topology=bytearray(b"\x00")), None)  # type: ignore[arg-type]
    (got,) = await store.load_all()
    assert got == record(original_dp_ranks=(0, 1), dead_committed=(1,), topology=b"\x00")


@pytest.mark.parametrize("bad", [
    {"generation": -1}, {"generation": True}, {"instance_id": -2}, {"phase": 3},
    {"original_dp_ranks": "0,1"}, {"dead_committed": (1.5,)}, {"topology": "not bytes"},
])
async def test_invalid_record_is_a_caller_error(new_store: StoreFactory, bad: dict[str, object]) -> None:
    store = new_store()
    with pytest.raises(ValueError):
        await store.put(record(**bad), None)
    assert await store.load_all() == []


async def test_generation_going_back_or_bad_expected_is_a_caller_error(new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(generation=0), None)
    await store.put(record(generation=5), 0)
    with pytest.raises(ValueError, match="go back"):
        await store.put(record(generation=4), 5)
    with pytest.raises(ValueError, match="expected_generation"):
        await store.put(record(generation=6), -1)
    with pytest.raises(ValueError, match="expected_generation"):
        await store.delete(1, None)  # type: ignore[arg-type]


async def test_second_store_sees_and_competes_with_first(new_store: StoreFactory) -> None:
    first, second = new_store(), new_store()
    await first.put(record(generation=0), None)
    (seen,) = await second.load_all()
    await second.put(dataclasses.replace(seen, generation=1, phase="RECONFIGURING"), seen.generation)
    with pytest.raises(StaleWriteError) as err:
        await first.put(record(generation=1, phase="DECIDING"), 0)
    assert err.value.actual_generation == 1
    assert [r.phase for r in await first.load_all()] == ["RECONFIGURING"]


async def test_concurrent_writers_on_one_store_with_same_expected_generation_one_wins(
        new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(generation=0), None)
    results = await asyncio.gather(
        *(store.put(record(generation=1, phase=f"W{i}"), 0) for i in range(8)), return_exceptions=True)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1
    assert all(isinstance(r, StaleWriteError) for r in results if r is not None)
    assert (await store.load_all())[0].phase == f"W{winners[0]}"


async def test_concurrent_writers_same_expected_generation_exactly_one_wins(new_store: StoreFactory) -> None:
    # Separate store objects: on etcd each has its own gRPC channel, so the race is real.
    writers = [new_store() for _ in range(4)]
    await writers[0].put(record(generation=0), None)
    for generation in range(1, 11):
        results = await asyncio.gather(
            *(w.put(record(generation=generation, phase=f"writer{i}"), generation - 1)
              for i, w in enumerate(writers)),
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if r is None]
        assert len(winners) == 1, results
        for r in results:
            if r is not None:
                assert isinstance(r, StaleWriteError), r
                assert (r.expected_generation, r.actual_generation) == (generation - 1, generation)
        assert await writers[-1].load_all() == [record(generation=generation, phase=f"writer{winners[0]}")]


async def test_closed_store_refuses_calls(new_store: StoreFactory) -> None:
    store = new_store()
    await store.put(record(), None)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load_all()
    with pytest.raises(StoreError, match="closed"):
        await store.put(record(generation=1), 0)
