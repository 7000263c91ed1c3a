"""Fault injection as ReportHardwareFault requests: names and levels, and what each source could not write."""

from __future__ import annotations

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.hardware.injection.report_request import build_report_request
from motor.controller.hardware.model import HardwareFaultError


def test_report_request_from_names_and_levels() -> None:
    req = build_report_request("node-a", "Ascend910-3", "80e18402", "SeparateNPU")
    assert (req.level, req.fault_handling, req.fault_type, req.source) == (
        controller_pb2.FAULT_LEVEL_L6, "SeparateNPU", "CardUnhealthy", "motorctl")
    assert build_report_request("node-a", "Ascend910-3", "80CB8002", "L4").fault_handling == "FreeRestartNPU"
    node = build_report_request("node-a", level=controller_pb2.FAULT_LEVEL_L6)
    assert (node.fault_type, node.fault_handling) == ("NodeDFault:CPU", "SeparateFault")
    pre = build_report_request("node-a", "Ascend910-3", "81078603", "PreSeparateNPU")
    assert (pre.level, pre.fault_handling) == (controller_pb2.FAULT_LEVEL_L1, "PreSeparateNPU")
    # An A5 card name and the switch's levels (the issue's `npu-1` and `--level Separate`).
    assert build_report_request("node-a", "npu-1", "80E18402", "Separate").level == controller_pb2.FAULT_LEVEL_L6
    switch = build_report_request("node-a", "", "00F103B0", "Separate", via="switch")
    assert (switch.level, switch.fault_handling, switch.fault_type) == (controller_pb2.FAULT_LEVEL_L6, "Separate", "SwitchFault")
    assert build_report_request("node-a", "", "00F103B0", "L6", via="switch").fault_handling == "Separate"
    noded = build_report_request("node-a", "", "0C000025", "SeparateFault", via="nodeinfo")
    assert (noded.level, noded.fault_handling) == (controller_pb2.FAULT_LEVEL_L6, "SeparateFault")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"npu_name": "", "via": "deviceinfo"}, "the device plugin lists cards"),
        ({"via": "switch"}, "via='switch' with npu_name='Ascend910-3'"),
        ({"via": "bmc"}, "via='bmc' is not one of"),
        ({"npu_name": "", "level": "L4", "via": "nodeinfo"}, "level='L4' cannot be published by nodeinfo"),
        ({"npu_name": "", "level": "RestartNPU", "via": "switch"}, "level='RestartNPU' cannot be published by switch"),
    ],
)
def test_report_request_refuses_what_its_source_cannot_write(kwargs, needle) -> None:
    args = {"node_name": "node-a", "npu_name": "Ascend910-3", "fault_code": "80E18402", "level": "L6"} | kwargs
    with pytest.raises(HardwareFaultError) as info:
        build_report_request(**args)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"level": "Catastrophic"}, "level='Catastrophic'"),
        ({"level": 0}, "level=FAULT_LEVEL_UNSPECIFIED"),
        ({"node_name": ""}, "node_name=''"),
        ({"fault_code": "80E18402;x"}, "fault_code="),
    ],
)
def test_report_request_refuses_what_the_controller_would(kwargs, needle) -> None:
    args = {"node_name": "node-a", "npu_name": "Ascend910-3", "fault_code": "80E18402", "level": "L6"} | kwargs
    with pytest.raises(HardwareFaultError) as info:
        build_report_request(**args)
    assert needle in str(info.value)
