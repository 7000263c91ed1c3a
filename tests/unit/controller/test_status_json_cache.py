"""The status page's per-instance JSON cache: an unchanged instance is not rendered again, a change in
any field (a nested engine status too) is, and a page of every instance drops the instances gone; the
page spliced from the cached texts is the JSON a single encoding of the whole page gives."""

from __future__ import annotations

import json

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.status import RuntimeJsonCache, message_json, status_page_text


def _runtime(instance_id: int, **fields) -> controller_pb2.InstanceFtRuntime:  # noqa: ANN003
    fields = {"original_dp_ranks": [0, 1], "alive_dp_ranks": [0, 1], **fields}
    return controller_pb2.InstanceFtRuntime(instance_id=instance_id, phase=controller_pb2.FT_PHASE_NORMAL, **fields)


def _text(proto: controller_pb2.InstanceFtRuntime) -> str:
    return json.dumps(message_json(proto))


def test_an_unchanged_instance_is_the_same_text_and_any_change_renders_anew() -> None:
    cache = RuntimeJsonCache()
    first = cache.texts([_runtime(1), _runtime(2)], every=True)
    again = cache.texts([_runtime(1), _runtime(2)], every=True)
    assert again[0] is first[0] and again[1] is first[1]
    assert first == [_text(_runtime(1)), _text(_runtime(2))]

    dead = _runtime(1, dead_committed=[1], alive_dp_ranks=[0])
    changed = cache.texts([dead, _runtime(2)], every=True)
    assert changed[0] == _text(dead) and json.loads(changed[0])["dead_committed"] == [1]
    assert changed[1] is first[1]

    status = common_pb2.EngineFtStatus(id=0, status=common_pb2.ENGINE_HEALTH_UNHEALTHY, fault_info="all2all")
    nested = _runtime(2)
    nested.engine_statuses[0].CopyFrom(status)
    assert cache.texts([dead, nested], every=True)[1] == _text(nested) != first[1]
    assert json.loads(cache.texts([_runtime(1, last_error="heartbeat missing")], every=False)[0])["last_error"] == \
        "heartbeat missing"


def test_a_page_of_every_instance_drops_the_instances_gone_and_one_instance_pages_keep_them() -> None:
    cache = RuntimeJsonCache()
    kept = cache.texts([_runtime(1), _runtime(2)], every=True)[1]
    cache.texts([_runtime(1)], every=False)
    assert cache.texts([_runtime(2)], every=False)[0] is kept
    cache.texts([_runtime(1)], every=True)
    assert cache.texts([_runtime(2)], every=False)[0] is not kept


def test_the_spliced_page_is_the_page_encoded_whole() -> None:
    protos = [_runtime(1, last_error='a "quoted" \\ error'), _runtime(2)]
    head, tail = {"phase": "DISABLED"}, {"leadership": {"replica_id": "r1", "term": 3}, "publishers": [{"ok": True}]}
    whole = json.dumps({**head, "instances": [message_json(p) for p in protos], **tail})
    assert status_page_text(head, RuntimeJsonCache().texts(protos, every=True), tail) == whole
    assert status_page_text({}, [], {}) == json.dumps({"instances": []})
