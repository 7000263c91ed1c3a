"""NodeD's mindx-dl-nodeinfo-<node>: the node's faults (npu_name ""), from documents built on its Go
structures."""

from __future__ import annotations

import json

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.formats.check_code import node_info_check_code
from motor.controller.hardware.formats.configmap import parse_configmap

from ..samples import NODE, NODED_SEPARATE, configmap_object, fault_dev, go, node_info, nodeinfo_data


def _nodeinfo(text: str, **kwargs):
    return parse_configmap(configmap_object(NODE, nodeinfo_data(text), "mindx-dl-nodeinfo-", "mindx-dl"), **kwargs)


def test_noded_separate_fault_is_an_l6_node_fault() -> None:
    faults, problems = _nodeinfo(NODED_SEPARATE)
    assert problems == []
    got = {f.fault_codes: (f.npu_name, f.level, f.fault_handling, f.fault_type) for f in faults}
    assert got == {
        ("0C000025",): ("", levels.L6, "SeparateFault", "NodeDFault:CPU"),
        ("08000213", "0800021B"): ("", levels.L1, "NotHandleFault", "NodeDFault:Memory"),
    }
    assert all(f.node_name == NODE and f.whole_node for f in faults)


@pytest.mark.parametrize(("name", "level"), [("NotHandleFault", levels.L1), ("PreSeparateFault", levels.L1),
                                              ("SeparateFault", levels.L6)])
def test_every_noded_level(name: str, level: int) -> None:
    status = {"NotHandleFault": "Healthy", "PreSeparateFault": "PreSeparate", "SeparateFault": "UnHealthy"}[name]
    (fault,), problems = _nodeinfo(node_info([fault_dev("NPU", 2, ["0C000025"], name)], status))
    assert problems == [] and fault.level == level and fault.npu_name == ""  # a BMC device id is not a card


def test_noded_before_2025_with_heartbeat_fields() -> None:
    faults, problems = _nodeinfo(node_info([fault_dev("CPU", 1, ["0C000025"], "SeparateFault")], "UnHealthy",
                                           heartbeat=(1760000400, 5)))
    assert problems == [] and [(f.fault_codes, f.level) for f in faults] == [(("0C000025",), levels.L6)]


def test_noded_document_shapes() -> None:
    reference, _ = _nodeinfo(NODED_SEPARATE)
    for doc, kwargs in [
        (nodeinfo_data(NODED_SEPARATE), {"node_name": NODE, "kind": "nodeinfo"}),  # the data mapping
        (NODED_SEPARATE, {"node_name": NODE, "kind": "nodeinfo"}),  # the mounted NodeInfo key file
        (json.loads(NODED_SEPARATE), {"node_name": NODE}),  # decoded
        (json.dumps(configmap_object(NODE, nodeinfo_data(NODED_SEPARATE), "mindx-dl-nodeinfo-", "mindx-dl")), {}),
    ]:
        faults, problems = parse_configmap(doc, **kwargs)
        assert problems == [] and faults == [f.__class__(**{**f.__dict__, "source": faults[0].source}) for f in reference]


def test_unhealthy_node_without_a_separate_entry_is_still_a_node_fault() -> None:
    faults, problems = _nodeinfo(node_info([fault_dev("Fan", 0, ["1A000001"], "NotHandleFault")], "UnHealthy"))
    assert {(f.fault_codes, f.level) for f in faults} == {(("1A000001",), levels.L1), (("NodeStatusUnHealthy",), levels.L6)}
    assert len(problems) == 1 and "NodeStatus='UnHealthy' without a SeparateFault entry" in problems[0]


def test_noded_check_code_as_noded_computes_it() -> None:
    for text in (NODED_SEPARATE, node_info(None, "Healthy"), node_info([], "Healthy", heartbeat=(1, 5))):
        cm = json.loads(text)
        assert node_info_check_code(cm["NodeInfo"]) == cm["CheckCode"]
    tampered = node_info([fault_dev("CPU", 0, ["0C000025"], "SeparateFault")], "UnHealthy", check_code="0" * 64)
    faults, problems = _nodeinfo(tampered)
    assert len(faults) == 1 and len(problems) == 1 and "CheckCode" in problems[0] and "still used" in problems[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "NodeInfo is not JSON"),
        ("[]", "NodeInfo is list, not an object"),
        ('{"CheckCode":""}', "NodeInfo.NodeInfo is missing"),
        (go({"NodeInfo": {"FaultDevList": {}, "NodeStatus": "UnHealthy"}}), "FaultDevList={} is not a list"),
    ],
)
def test_unusable_nodeinfo_is_reported(text: str, needle: str) -> None:
    faults, problems = _nodeinfo(text)
    assert faults == [] and any(needle in p for p in problems), problems


def test_bad_fault_devs_are_skipped_and_named() -> None:
    devs = [
        "CPU",
        fault_dev(7, 0, ["0C000025"], "SeparateFault"),
        fault_dev("CPU", "zero", ["0C000025"], "SeparateFault"),
        fault_dev("CPU", 1, "0C000025", "SeparateFault"),
        fault_dev("CPU", 2, [], "SeparateFault"),
        fault_dev("CPU", 3, ["0C000025"], "ExplodeFault"),
        fault_dev("CPU", 4, ["0C000025"], 2),
        fault_dev("Disk", 5, ["0C000026", "x;y"], "SeparateFault"),
    ]
    faults, problems = _nodeinfo(node_info(devs, "Maybe"))
    assert [(f.fault_codes, f.level) for f in faults] == [(("0C000026",), levels.L6)]
    joined = "\n".join(problems)
    for needle in ("NodeStatus='Maybe'", "FaultDevList[0] is str", "DeviceType=7", "DeviceId='zero'",
                   "FaultCode='0C000025' is not a list", "(CPU 2): no usable FaultCode", "FaultLevel='ExplodeFault'",
                   "FaultLevel=2 is not a string", "'x;y'"):
        assert needle in joined, needle
    assert len(problems) == 9


def test_no_nodeinfo_key_is_reported() -> None:
    obj = configmap_object(NODE, {"updateTime": "2025-10-09T09:30:00Z"}, "mindx-dl-nodeinfo-", "mindx-dl")
    faults, problems = parse_configmap(obj)
    assert faults == [] and "mindx-dl-nodeinfo-worker-7: no NodeInfo key" in problems[0]
