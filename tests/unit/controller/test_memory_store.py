"""What the runtime store needs no server for: a model-based check of MemoryRuntimeStore under every
interleaving of two writers, the record codec's edge cases, and the store factory's choice and log line.

The contract both backends keep (compare-and-set on generation, caller errors, a closed store) runs
over memory and etcd in tests/integration/controller/test_store_contract.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from motor.controller.config import StoreConfig
from motor.controller.persistence import (
    EtcdRuntimeStore,
    MemoryRuntimeStore,
    PersistedInstance,
    StaleWriteError,
    StoreError,
    decode_record,
    encode_record,
    open_runtime_store,
)

pytestmark = pytest.mark.timeout(60)


def record(instance_id: int = 1, generation: int = 0, **changes: object) -> PersistedInstance:
    base = PersistedInstance(
        instance_id=instance_id,
        phase="NORMAL",
        generation=generation,
        original_dp_ranks=(0, 1, 2, 3),
        dead_committed=(),
        fallback_strategy="instance_reconfiguration",
        topology=b"\x08\x01\x12\x00\xff",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


# ---- model-based: two writers interleaving puts, deletes and re-reads ----------------------------

OPS = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(["put", "delete", "reload"]), st.sampled_from([1, 2])),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_two_writers_interleaving_matches_model(ops: list[tuple[int, str, int]]) -> None:
    asyncio.run(_run_interleaving(ops))


async def _run_interleaving(ops: list[tuple[int, str, int]]) -> None:
    store = MemoryRuntimeStore()
    truth: dict[int, PersistedInstance] = {}
    # What each writer last saw of each instance (None: believes there is no record).
    seen: list[dict[int, int | None]] = [{}, {}]
    for step, (writer, op, iid) in enumerate(ops):
        view = seen[writer]
        expected = view.get(iid)
        actual = truth[iid].generation if iid in truth else None
        if op == "reload":
            view.clear()
            view.update({r.instance_id: r.generation for r in await store.load_all()})
        elif op == "put":
            new = record(iid, 0 if expected is None else expected + 1, phase=f"w{writer}s{step}")
            if expected == actual:
                await store.put(new, expected)
                truth[iid] = new
                view[iid] = new.generation
            else:
                with pytest.raises(StaleWriteError) as err:
                    await store.put(new, expected)
                assert (err.value.expected_generation, err.value.actual_generation) == (expected, actual)
                view[iid] = actual
        elif expected is not None:  # delete needs a generation
            if expected == actual:
                await store.delete(iid, expected)
                del truth[iid]
                view[iid] = None
            else:
                with pytest.raises(StaleWriteError):
                    await store.delete(iid, expected)
                view[iid] = actual
        assert await store.load_all() == [truth[i] for i in sorted(truth)]


# ---- codec -----------------------------------------------------------------------------------------


def test_codec_round_trip_is_canonical_json_with_base64_topology() -> None:
    rec = record(7, 3, dead_committed=(1, 2), topology=bytes(range(256)))
    data = encode_record(rec)
    doc = json.loads(data)
    assert doc["instance_id"] == 7 and doc["generation"] == 3 and doc["schema_version"] == 1
    assert isinstance(doc["topology_b64"], str)
    assert decode_record(data, key="k") == rec
    assert encode_record(decode_record(data, key="k")) == data


@pytest.mark.parametrize("data, reason", [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b"{}", "schema_version"),
])
def test_decode_refuses_garbage_naming_the_key(data: bytes, reason: str) -> None:
    with pytest.raises(StoreError, match=reason) as err:
        decode_record(data, key="/motor/v1/instances/9")
    assert "'/motor/v1/instances/9'" in str(err.value)


@pytest.mark.parametrize("field, value, reason", [
    ("generation", "3", "generation"),
    ("generation", -1, "generation"),
    ("original_dp_ranks", [0, "1"], "original_dp_ranks"),
    ("topology_b64", "%%%", "base64"),
    ("phase", None, "phase"),
    ("extra", 1, "unknown fields"),
])
def test_decode_refuses_bad_fields(field: str, value: object, reason: str) -> None:
    doc = json.loads(encode_record(record()))
    doc[field] = value
    with pytest.raises(StoreError, match=reason):
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")


def test_decode_refuses_missing_field() -> None:
    doc = json.loads(encode_record(record()))
    del doc["dead_committed"]
    with pytest.raises(StoreError, match=r"missing fields \['dead_committed'\]"):
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")


@pytest.mark.parametrize("field, value, named", [
    ("phase", ["NORMAL"], "phase ['NORMAL']"),  # wrong type
    ("fallback_strategy", 7, "fallback_strategy 7"),
    ("generation", True, "generation True"),  # bool is not an int
    ("instance_id", False, "instance_id False"),
    ("generation", 2.0, "generation 2.0"),
    ("dead_committed", [1, True], "dead_committed[1] True"),
    ("original_dp_ranks", "0,1", "original_dp_ranks '0,1'"),
    ("topology_b64", "not*base64", "topology_b64 'not*base64': not base64"),
    ("topology_b64", "QQ", "topology_b64 'QQ': not base64"),  # missing padding
    ("schema_version", 2, "schema_version 2 is not 1"),
    ("schema_version", True, "schema_version True is not 1"),
    ("schema_version", "1", "schema_version '1' is not 1"),
])
def test_decode_errors_name_the_key_field_and_value(field: str, value: object, named: str) -> None:
    doc = json.loads(encode_record(record()))
    doc[field] = value
    with pytest.raises(StoreError) as err:
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")
    assert str(err.value).startswith("corrupt runtime record under key '/p/instances/1': ")
    assert named in str(err.value)


def test_decode_names_unknown_keys_and_reports_every_problem() -> None:
    doc = json.loads(encode_record(record()))
    doc.update(zeta=1, alpha=2, generation=-1)
    del doc["phase"]
    with pytest.raises(StoreError) as err:
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")
    assert str(err.value) == ("corrupt runtime record under key '/p/instances/1': missing fields ['phase']; "
                              "unknown fields ['alpha', 'zeta']; generation -1: Input should be greater than "
                              "or equal to 0")


def test_wrong_schema_version_is_the_only_problem_reported() -> None:
    # Another version's record may have other fields entirely: listing them would mislead.
    doc = {"schema_version": 2, "instance": {"id": 1}}
    with pytest.raises(StoreError) as err:
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")
    assert str(err.value) == "corrupt runtime record under key '/p/instances/1': schema_version 2 is not 1"


def test_decode_quotes_long_values_shortened() -> None:
    doc = json.loads(encode_record(record()))
    doc["phase"] = ["x" * 10_000]
    with pytest.raises(StoreError) as err:
        decode_record(json.dumps(doc).encode(), key="/p/instances/1")
    assert "phase ['xxx" in str(err.value) and "..." in str(err.value)
    assert len(str(err.value)) < 300


def test_decode_accepts_stored_bytes_of_the_previous_encoder() -> None:
    # Bytes as written before the pydantic model: stored data must keep decoding, and re-encode equal.
    stored = (b'{"dead_committed":[2],"fallback_strategy":"instance_reconfiguration","generation":3,'
              b'"instance_id":7,"original_dp_ranks":[0,1,2,3],"phase":"SCALED_DOWN_RUNNING",'
              b'"schema_version":1,"topology_b64":"CAESAP8="}')
    rec = decode_record(stored, key="k")
    assert rec == record(7, 3, phase="SCALED_DOWN_RUNNING", dead_committed=(2,))
    assert encode_record(rec) == stored


@pytest.mark.parametrize("bad, named", [
    ({"generation": True}, "generation True"),
    ({"instance_id": -2}, "instance -2: invalid runtime record: instance_id -2"),
    ({"phase": 3}, "phase 3"),
    ({"dead_committed": (1.5,)}, "dead_committed[0] 1.5"),
    ({"topology": "not bytes"}, "topology 'not bytes'"),
])
def test_invalid_record_error_names_the_field_and_value(bad: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError) as err:
        encode_record(record(**bad))
    assert named in str(err.value)


# ---- factory ---------------------------------------------------------------------------------------


def test_factory_without_endpoints_is_memory_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="motor.controller.persistence.factory"):
        store = open_runtime_store(StoreConfig())
    assert isinstance(store, MemoryRuntimeStore)
    assert store.description == "in-memory (state is lost on restart)"
    assert "no etcd endpoints configured: using in-memory store; state is lost on restart" in caplog.text


def test_factory_with_endpoints_is_etcd_and_connects_lazily() -> None:
    store = open_runtime_store(StoreConfig(etcd_endpoints=["127.0.0.1:2379", "127.0.0.2:2379"], key_prefix="/m"))
    assert isinstance(store, EtcdRuntimeStore)
    assert store.description == "etcd 127.0.0.1:2379,127.0.0.2:2379 prefix /m"
    assert store.record_key(4) == "/m/instances/4"
    assert store.generation_key(4) == "/m/instances/4/generation"


@pytest.mark.parametrize("kwargs, match", [
    ({"endpoints": []}, "at least one endpoint"),
    ({"endpoints": "127.0.0.1:2379"}, "list"),
    ({"endpoints": ["localhost"]}, "host:port"),
    ({"endpoints": ["127.0.0.1:2379"], "key_prefix": "motor/"}, "key_prefix"),
    ({"endpoints": ["127.0.0.1:2379"], "request_timeout_sec": 0}, "request_timeout_sec"),
])
def test_etcd_store_refuses_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EtcdRuntimeStore(**kwargs)  # type: ignore[arg-type]
