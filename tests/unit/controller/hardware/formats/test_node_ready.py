"""A Kubernetes Node's Ready condition → a whole-node fault when NotReady."""

from __future__ import annotations

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.formats.node_ready import parse_node

from ..samples import NODE, NODE_READY, node_not_ready


def test_ready_node_is_no_fault() -> None:
    assert parse_node(NODE_READY) == ([], [])


@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_not_ready_node_is_a_whole_node_l6_fault(status: str) -> None:
    faults, problems = parse_node(node_not_ready(status=status))
    assert problems == []
    (fault,) = faults
    assert (fault.node_name, fault.npu_name, fault.level, fault.fault_type) == (NODE, "", levels.L6, "NodeNotReady")
    assert fault.fault_codes == ("NodeNotReady",)
    assert fault.fault_time_unix_sec == 1760002200.0  # 2025-10-09T09:30:00Z
    assert fault.source == "k8s"


def test_node_without_ready_condition_is_no_fault() -> None:
    assert parse_node({"metadata": {"name": NODE}, "status": {"conditions": []}}) == ([], [])
    assert parse_node({"metadata": {"name": NODE}}) == ([], [])


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"metadata": {}}, "no metadata.name"),
        ({"metadata": {"name": NODE}, "status": {"conditions": "Ready"}}, "not a list"),
        (node_not_ready(status="Maybe"), "status='Maybe'"),
    ],
)
def test_malformed_nodes_are_reported(obj, needle) -> None:
    faults, problems = parse_node(obj)
    assert faults == [] and needle in problems[0]


def test_node_with_bad_transition_time_still_faults() -> None:
    faults, problems = parse_node(node_not_ready(when="half past nine"))
    assert len(faults) == 1 and faults[0].fault_time_unix_sec == 0.0
    assert "lastTransitionTime='half past nine'" in problems[0]
