"""The status page's per-instance JSON cache: an unchanged instance is not rendered again, a change in
any field (a nested engine status too) is, and a page of every instance drops the instances gone."""

from __future__ import annotations

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.status import RuntimeJsonCache, message_json


def _runtime(instance_id: int, **fields) -> controller_pb2.InstanceFtRuntime:  # noqa: ANN003
    fields = {"original_dp_ranks": [0, 1], "alive_dp_ranks": [0, 1], **fields}
    return controller_pb2.InstanceFtRuntime(instance_id=instance_id, phase=controller_pb2.FT_PHASE_NORMAL, **fields)


def test_an_unchanged_instance_is_the_same_document_and_any_change_renders_anew() -> None:
    cache = RuntimeJsonCache()
    first = cache.docs([_runtime(1), _runtime(2)], every=True)
    again = cache.docs([_runtime(1), _runtime(2)], every=True)
    assert again[0] is first[0] and again[1] is first[1]
    assert first == [message_json(_runtime(1)), message_json(_runtime(2))]

    dead = _runtime(1, dead_committed=[1], alive_dp_ranks=[0])
    changed = cache.docs([dead, _runtime(2)], every=True)
    assert changed[0] == message_json(dead) and changed[0]["dead_committed"] == [1]
    assert changed[1] is first[1]

    status = common_pb2.EngineFtStatus(id=0, status=common_pb2.ENGINE_HEALTH_UNHEALTHY, fault_info="all2all")
    nested = _runtime(2)
    nested.engine_statuses[0].CopyFrom(status)
    assert cache.docs([dead, nested], every=True)[1] == message_json(nested) != first[1]
    assert cache.docs([_runtime(1, last_error="heartbeat missing")], every=False)[0]["last_error"] == "heartbeat missing"


def test_a_page_of_every_instance_drops_the_instances_gone_and_one_instance_pages_keep_them() -> None:
    cache = RuntimeJsonCache()
    kept = cache.docs([_runtime(1), _runtime(2)], every=True)[1]
    cache.docs([_runtime(1)], every=False)
    assert cache.docs([_runtime(2)], every=False)[0] is kept
    cache.docs([_runtime(1)], every=True)
    assert cache.docs([_runtime(2)], every=False)[0] is not kept
