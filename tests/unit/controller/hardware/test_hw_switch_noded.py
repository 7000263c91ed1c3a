"""Node-level sources: the device plugin's SwitchInfoCfg (A3/A5) and NodeD's mindx-dl-nodeinfo-<node>,
both the node's faults (npu_name ""), from documents built on their Go structures."""

from __future__ import annotations

import json

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.checkcode import go_json, go_string, node_info_check_code
from motor.controller.hardware.parser import parse_configmap
from motor.controller.hardware.switch_parser import alarm_code

from .hw_samples import (
    EMPTY_SWITCH,
    NODE,
    NODED_SEPARATE,
    configmap_object,
    fault_dev,
    full_data,
    go,
    node_info,
    nodeinfo_data,
    sha,
    switch_event,
    switch_info,
    switch_info_2024,
)

LINK = (0x00F103B0, "155904", "cpu", 0, 3, 1760000300000, "Separate")
SUB = (0x00F1FF09, "na", "na", 1, 4, 1760000301000, "SubHealthFault")


def _switch(text: str):
    return parse_configmap(full_data(switch=text), node_name=NODE)


def _switch_faults(text: str):
    faults, problems = _switch(text)
    return [f for f in faults if f.fault_type == "SwitchFault"], problems


# --- SwitchInfoCfg ----------------------------------------------------------------------------


def test_switch_separate_is_an_l6_node_fault() -> None:
    (fault,), problems = _switch_faults(switch_info("Separate", "UnHealthy", [LINK, SUB]))
    assert problems == []
    assert (fault.node_name, fault.npu_name, fault.level, fault.fault_handling) == (NODE, "", levels.L6, "Separate")
    assert fault.whole_node and fault.fault_codes == ("00F103B0", "00F1FF09")
    assert fault.fault_time_unix_sec == 1760000301.0  # the latest event (AlarmRaisedTime, ms)


@pytest.mark.parametrize(
    ("level", "status", "expected"),
    [
        ("NotHandle", "Healthy", levels.L1),
        ("SubHealthFault", "SubHealthy", levels.L1),
        ("RestartRequest", "UnHealthy", levels.L2),
        ("PreSeparate", "PreSeparate", levels.L1),
        ("Separate", "UnHealthy", levels.L6),  # ResetFault codes too: LoadSwitchFaultCode folds them into Separate
    ],
)
def test_every_switch_level(level: str, status: str, expected: int) -> None:
    (fault,), problems = _switch_faults(switch_info(level, status, [(*LINK[:6], level)]))
    assert problems == [] and fault.level == expected and fault.fault_handling == level


def test_switch_during_a_card_reset_is_healthy_and_not_handled() -> None:
    # UpdateSwitchFaultInfoAndFaultLevel: NodeStatus Healthy, every code's level NotHandle.
    (fault,), problems = _switch_faults(switch_info("NotHandle", "Healthy", [(*LINK[:6], "NotHandle")]))
    assert problems == [] and fault.level == levels.L1


def test_switch_2024_format_bare_alarm_ids() -> None:
    (fault,), problems = _switch_faults(switch_info_2024("Separate", "UnHealthy", [0x00F103B0, 0x0A000001]))
    assert problems == []
    assert (fault.fault_codes, fault.level, fault.fault_time_unix_sec) == (("00F103B0", "0A000001"), levels.L6, 0.0)


def test_switch_without_faults_is_nothing() -> None:
    assert _switch_faults(EMPTY_SWITCH) == ([], [])  # A5 / no switch: the empty struct
    assert _switch_faults(switch_info("", "Healthy", [])) == ([], [])
    assert _switch_faults("") == ([], [])


def test_switch_level_from_the_per_code_map_when_the_summary_is_empty() -> None:
    (fault,), problems = _switch_faults(switch_info("", "UnHealthy", [LINK, SUB]))
    assert problems == [] and fault.level == levels.L6 and fault.fault_handling == ""


def test_switch_next_to_card_faults_in_one_configmap() -> None:
    faults, problems = _switch(switch_info("Separate", "UnHealthy", [LINK]))
    assert problems == []
    assert len([f for f in faults if f.whole_node]) == 1 and len([f for f in faults if not f.whole_node]) == 5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "SwitchInfoCfg is not JSON"),
        ("[]", "SwitchInfoCfg is list, not an object"),
        (go({"FaultCode": "x", "FaultLevel": "Separate"}), "FaultCode='x' is not a list"),
        (go({"FaultCode": [switch_event(*LINK[:6])], "FaultLevel": "Explode", "NodeStatus": "UnHealthy"}),
         "FaultLevel='Explode' is not a switch level"),
        (go({"FaultCode": [switch_event(*LINK[:6])], "FaultLevel": 4}), "FaultLevel=4 is not a string"),
        (go({"FaultCode": [switch_event(*LINK[:6])], "FaultLevel": ""}), "FaultLevel is empty and no per-code level"),
        (go({"FaultCode": [], "FaultLevel": "Separate", "NodeStatus": "UnHealthy"}), "no usable FaultCode"),
    ],
)
def test_malformed_switch_info_is_reported(text: str, needle: str) -> None:
    faults, problems = _switch_faults(text)
    assert faults == []
    assert any(needle in p for p in problems), problems
    assert all("SwitchInfoCfg" in p for p in problems)


def test_bad_switch_items_are_dropped_one_by_one() -> None:
    items = [switch_event(*LINK[:6]), 7, "{not json", go({"AssembledFaultCode": "0x1"}), "zz;z"]
    text = go({"FaultCode": items, "FaultLevel": "Separate", "UpdateTime": 1, "NodeStatus": "Broken",
               "FaultTimeAndLevelMap": {"k": {"fault_time": "soon", "fault_level": "Worse"}, "j": 3}})
    (fault,), problems = _switch_faults(text)
    assert fault.fault_codes == ("00F103B0",) and fault.level == levels.L6
    assert len(problems) == 8, problems
    joined = "\n".join(problems)
    for needle in ("NodeStatus='Broken'", "FaultCode[1]=7", "FaultCode[2] is not a switch event",
                   "AssembledFaultCode='0x1'", "FaultCode[4]='zz;z'", "fault_time='soon'", "fault_level='Worse'",
                   "['j'] is not an object"):
        assert needle in joined


def test_assembled_codes() -> None:
    assert alarm_code("[0x00f103b0,155904,na,na]") == "00F103B0"
    assert alarm_code("[0x00f1ff09,na,cpu,na]") == "00F1FF09"
    assert alarm_code("[0x1,na,na]") is None and alarm_code("00f103b0") is None


# --- NodeD nodeinfo ---------------------------------------------------------------------------


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


def test_go_json_matches_go() -> None:
    assert go_string('a<b>&c"\\\n\t\x01\u2028é') == '"a\\u003cb\\u003e\\u0026c\\"\\\\\\n\\t\\u0001\\u2028é"'
    assert go_json({"b": 1, "a": [True, None, 1.0]}) == '{"a":[true,null,1],"b":1}'
    assert go_json({"b": 1, "a": 2, "z": 3}, {"": ("b", "a")}) == '{"b":1,"a":2,"z":3}'
    info = {"FaultDevList": [{"FaultLevel": "SeparateFault", "DeviceId": 0, "FaultCode": ["0C000025"], "DeviceType": "CPU"}],
            "NodeStatus": "UnHealthy"}
    text = '{"FaultDevList":[{"DeviceType":"CPU","DeviceId":0,"FaultCode":["0C000025"],"FaultLevel":"SeparateFault"}],"NodeStatus":"UnHealthy"}'
    assert node_info_check_code(info) == sha(text)


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
