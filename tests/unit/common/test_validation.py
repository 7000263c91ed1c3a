"""Field bounds of every request: exactly at the bound passes, one past it is refused naming the field path."""

from __future__ import annotations

import pytest

from gen.motor.v1 import common_pb2, controller_pb2, coordinator_pb2, node_manager_pb2
from motor.common.validation import (
    DEFAULT_REPEATED_LIMIT,
    MAX_ID_CHARS,
    MAX_TEXT_CHARS,
    REPEATED_LIMITS,
    FieldBoundError,
    check_bounds,
)


def test_request_id_at_and_past_the_bound() -> None:
    check_bounds(node_manager_pb2.GuardRequest(request_id="r" * MAX_ID_CHARS))
    with pytest.raises(FieldBoundError) as info:
        check_bounds(node_manager_pb2.GuardRequest(request_id="r" * (MAX_ID_CHARS + 1)))
    assert info.value.path == "request_id"
    assert str(info.value) == f"field request_id: {MAX_ID_CHARS + 1} characters exceeds the limit of {MAX_ID_CHARS}"


def test_rank_list_at_and_past_the_bound() -> None:
    check_bounds(node_manager_pb2.ApplyRequest(removed_dp_ranks=list(range(DEFAULT_REPEATED_LIMIT))))
    with pytest.raises(FieldBoundError, match=r"field removed_dp_ranks: 4097 entries exceed the limit of 4096"):
        check_bounds(node_manager_pb2.ApplyRequest(removed_dp_ranks=list(range(DEFAULT_REPEATED_LIMIT + 1))))


def test_free_text_has_a_larger_bound_than_ids() -> None:
    check_bounds(controller_pb2.ReportSoftwareFaultRequest(evidence="e" * MAX_TEXT_CHARS))
    with pytest.raises(FieldBoundError, match="field evidence: "):
        check_bounds(controller_pb2.ReportSoftwareFaultRequest(evidence="e" * (MAX_TEXT_CHARS + 1)))
    with pytest.raises(FieldBoundError, match="field pod_ip: "):
        check_bounds(controller_pb2.ReportSoftwareFaultRequest(pod_ip="1" * (MAX_ID_CHARS + 1)))


def test_nested_messages_name_the_whole_path() -> None:
    req = coordinator_pb2.RefreshRequest(instances=[common_pb2.Instance(id=1), common_pb2.Instance(id=2)])
    req.instances[1].endpoints.add(id=0, ip="x" * (MAX_ID_CHARS + 1))
    with pytest.raises(FieldBoundError) as info:
        check_bounds(req)
    assert info.value.path == "instances[1].endpoints[0].ip"
    report = controller_pb2.ReportSoftwareFaultRequest()
    report.status.mask.extend(range(DEFAULT_REPEATED_LIMIT + 1))
    with pytest.raises(FieldBoundError, match=r"field status\.mask: 4097 entries"):
        check_bounds(report)


def test_repeated_strings_and_messages_are_checked_item_by_item() -> None:
    req = controller_pb2.RegisterRequest()
    ep = req.endpoints.add(id=0)
    ep.device_infos.add(device_id="d" * (MAX_ID_CHARS + 1))
    with pytest.raises(FieldBoundError, match=r"field endpoints\[0\]\.device_infos\[0\]\.device_id"):
        check_bounds(req)
    many = controller_pb2.RegisterRequest()
    for _ in range(REPEATED_LIMITS["device_infos"] + 1):
        many.endpoints.add().device_infos.add()
    check_bounds(many)  # 65 endpoints with one card each: fine
    crowded = controller_pb2.RegisterRequest()
    crowded.endpoints.add().device_infos.extend([common_pb2.DeviceInfo()] * (REPEATED_LIMITS["device_infos"] + 1))
    with pytest.raises(FieldBoundError, match=r"endpoints\[0\]\.device_infos: 65 entries exceed the limit of 64"):
        check_bounds(crowded)


def test_every_request_message_of_every_service_passes_when_empty() -> None:
    for module in (controller_pb2, coordinator_pb2, node_manager_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                cls = getattr(module, method.input_type.name, None) or getattr(common_pb2, method.input_type.name)
                check_bounds(cls())
