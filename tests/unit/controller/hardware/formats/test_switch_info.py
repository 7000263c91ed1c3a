"""The device plugin's SwitchInfoCfg (A3/A5): the node's fault (npu_name ""), from documents built on
its Go structures."""

from __future__ import annotations

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.formats.configmap import parse_configmap
from motor.controller.hardware.formats.switch_info import alarm_code

from ..samples import EMPTY_SWITCH, NODE, full_data, go, switch_event, switch_info, switch_info_2024

LINK = (0x00F103B0, "155904", "cpu", 0, 3, 1760000300000, "Separate")
SUB = (0x00F1FF09, "na", "na", 1, 4, 1760000301000, "SubHealthFault")


def _switch(text: str):
    return parse_configmap(full_data(switch=text), node_name=NODE)


def _switch_faults(text: str):
    faults, problems = _switch(text)
    return [f for f in faults if f.fault_type == "SwitchFault"], problems


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
