"""The device plugin's device-info ConfigMap: documents built from MindCluster's Go structures (today's
and 2023's), card lists, ManuallySeparateNPU, and what is malformed reported (named) and skipped."""

from __future__ import annotations

import json

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.formats.configmap import parse_configmap

from ..samples import (
    A5_CARDS,
    CUSTOM_CARDS,
    DEVICE_INFO_CFG,
    FAULTS,
    FAULT_LIST_TEXT,
    HOT_RESET,
    HOT_RESET_2023,
    NODE,
    configmap_object,
    device_info_cfg,
    device_info_cfg_2023,
    device_info_text,
    device_list,
    fault,
    fault_2023,
    full_data,
    normal,
)


def _by_card(faults):
    return {(f.npu_name, f.fault_codes): f for f in faults}


def test_real_format_sample_parses_every_entry() -> None:
    faults, problems = parse_configmap(configmap_object(NODE, full_data()))
    assert problems == []
    got = _by_card(faults)
    assert set(got) == {
        ("Ascend910-1", ("80CB8002",)),
        ("Ascend910-2", ("80E18402", "A8028801")),
        ("Ascend910-5", ("80CB8002",)),
        ("Ascend910-6", ("81078603",)),
        ("Ascend910-7", ("80E21007",)),
    }
    lost = got[("Ascend910-2", ("80E18402", "A8028801"))]
    assert (lost.node_name, lost.level, lost.fault_handling, lost.fault_type) == (NODE, levels.L6, "SeparateNPU", "CardUnhealthy")
    # The latest per-code time, in seconds.
    assert lost.fault_time_unix_sec == pytest.approx(1760000000.456)
    assert lost.source == "configmap"
    assert got[("Ascend910-1", ("80CB8002",))].level == levels.L5
    assert got[("Ascend910-6", ("81078603",))].level == levels.L1  # PreSeparateNPU
    assert got[("Ascend910-6", ("81078603",))].fault_handling == "PreSeparateNPU"
    assert got[("Ascend910-7", ("80E21007",))].level == levels.L1


def test_same_code_on_two_cards_stays_two_faults() -> None:
    faults, _ = parse_configmap(DEVICE_INFO_CFG, node_name=NODE)
    same = [f for f in faults if f.fault_codes == ("80CB8002",)]
    assert sorted(f.npu_name for f in same) == ["Ascend910-1", "Ascend910-5"]
    assert len({f.key for f in same}) == 2


def test_check_code_mismatch_is_reported_but_entries_kept() -> None:
    tampered = device_info_cfg(device_info_text(), check_code="0" * 64)
    faults, problems = parse_configmap(tampered, node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 1 and "CheckCode" in problems[0] and "still used" in problems[0]


def test_2023_format_is_read() -> None:
    # v5.0.0: {DeviceInfo, CheckCode}, entries without fault_handling and times, no -Recovering.
    entries = [fault_2023(f["npu_name"], f["fault_level"], f["fault_code"].split(","), f["fault_type"]) for f in FAULTS]
    listed = device_list(faults=entries, available="Ascend910-0,Ascend910-3,Ascend910-4,Ascend910-7",
                         unhealthy="Ascend910-1,Ascend910-2,Ascend910-5", network="Ascend910-6", recovering=None)
    faults, problems = parse_configmap({"DeviceInfoCfg": device_info_cfg_2023(device_info_text(listed)),
                                        "ManuallySeparateNPU": ""}, node_name=NODE)
    assert problems == []
    today, _ = parse_configmap(DEVICE_INFO_CFG, node_name=NODE)
    assert [(f.key, f.level, f.fault_handling) for f in faults] == [(f.key, f.level, f.fault_handling) for f in today]
    assert all(f.fault_time_unix_sec == 0.0 for f in faults)  # 2023 wrote no fault times


def test_a5_rack_id_document_is_read_and_its_check_code_is_over_device_info() -> None:
    text = device_info_cfg(device_info_text(A5_CARDS), super_pod_id=1, server_index=4, rack_id=0)
    assert '"RackID":0}' in text
    faults, problems = parse_configmap(text, node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level, f.fault_handling) for f in faults] == [("npu-1", levels.L6, "SeparateNPU")]


def test_operator_resource_names_are_read() -> None:
    faults, problems = parse_configmap(device_info_cfg(device_info_text(CUSTOM_CARDS)), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level) for f in faults] == [("custom910-3", levels.L5)]


def test_hot_reset_ring_mates_are_evidence_not_noise() -> None:
    # The ring-mates' NormalNPU/NormalNetwork entries (empty fault_code) are no fault of their own,
    # not a problem; the -Recovering list makes each a card under reset (L5).
    faults, problems = parse_configmap(device_info_cfg(device_info_text(HOT_RESET)), node_name=NODE)
    assert problems == []
    got = {f.npu_name: (f.fault_codes, f.level, f.fault_type) for f in faults}
    assert got == {
        "Ascend910-0": ((), levels.L5, "CardRecovering"),
        "Ascend910-1": (("80CB8002",), levels.L5, "CardUnhealthy"),  # its own entry covers its reset
        "Ascend910-2": ((), levels.L5, "CardRecovering"),
        "Ascend910-3": ((), levels.L5, "CardRecovering"),
    }
    assert all(f.fault_time_unix_sec == 0.0 for f in faults if f.fault_type == "CardRecovering")


def test_hot_reset_in_the_2023_format() -> None:
    # 2023: no entry and no -Recovering for the ring-mates; -Unhealthy says they are withdrawn.
    faults, problems = parse_configmap(device_info_cfg_2023(device_info_text(HOT_RESET_2023)), node_name=NODE)
    assert problems == []
    got = {f.npu_name: (f.level, f.fault_type) for f in faults}
    assert got == {"Ascend910-0": (levels.L5, "CardWithdrawn"), "Ascend910-1": (levels.L5, "CardUnhealthy"),
                   "Ascend910-2": (levels.L5, "CardWithdrawn"), "Ascend910-3": (levels.L5, "CardWithdrawn")}


def test_card_lists_only_add_what_entries_do_not_say() -> None:
    listed = device_list(faults=[fault("Ascend910-4", "NotHandleFault", ["80E21007"]), normal("Ascend910-5", True)],
                         unhealthy="", network="Ascend910-5,Ascend910-6", recovering="Ascend910-4")
    faults, problems = parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE)
    assert problems == []
    got = {(f.npu_name, f.fault_type): f.level for f in faults}
    assert got == {
        ("Ascend910-4", "CardUnhealthy"): levels.L1,       # its entry (NotHandleFault)…
        ("Ascend910-4", "CardRecovering"): levels.L5,      # …is less than its reset
        ("Ascend910-5", "CardNetworkListed"): levels.L1,   # NormalNetwork entry, listed network-unhealthy
        ("Ascend910-6", "CardNetworkListed"): levels.L1,   # listed without any entry (PreSeparateNPU default)
    }


def test_only_normal_entries_mean_no_fault() -> None:
    listed = device_list(faults=[normal("Ascend910-0", True), normal("Ascend910-0", False)], available="Ascend910-0")
    assert parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE) == ([], [])


def test_volcano_node_entry_is_not_a_device_plugin_entry() -> None:
    volcano = {"fault_type": "NodeUnhealthy", "npu_name": "", "large_model_fault_level": "SeparateNPU",
               "fault_level": "SeparateNPU", "fault_handling": "SeparateNPU", "fault_code": "heartbeatTimeOut"}
    listed = device_list(faults=[volcano, fault("Ascend910-3", "RestartNPU", ["80CB8002"])], unhealthy="Ascend910-3")
    faults, problems = parse_configmap(device_info_cfg(device_info_text(listed)), node_name=NODE)
    assert [f.npu_name for f in faults] == ["Ascend910-3"]
    assert len(problems) == 1 and "Volcano's node entry" in problems[0] and "fault_type='NodeUnhealthy'" in problems[0]


def test_card_list_that_is_not_a_string_is_reported() -> None:
    info = '{"DeviceList":{"huawei.com/Ascend910-Fault":"[]","huawei.com/Ascend910-Recovering":["Ascend910-1"]},"UpdateTime":1}'
    faults, problems = parse_configmap(device_info_cfg(info, check_code=""), node_name=NODE)
    assert faults == []
    assert len(problems) == 1 and '["huawei.com/Ascend910-Recovering"]=[\'Ascend910-1\']' in problems[0]


def test_manually_separated_cards_with_upgrade_reason() -> None:
    data = full_data()
    data["ManuallySeparateNPU"] = "Ascend910-3, Ascend910-4"
    data["UpgradeFaultReason"] = json.dumps(
        {"Ascend910-3": [{"upgrade_time": 1760000300000, "fault_code": "80CB8002", "fault_level": "ManuallySeparateNPU",
                          "upgrade_type": "FaultFrequency"}]}
    )
    faults, problems = parse_configmap(data, node_name=NODE)
    assert problems == []
    manual = {f.npu_name: f for f in faults if f.fault_type == "ManuallySeparateNPU"}
    assert set(manual) == {"Ascend910-3", "Ascend910-4"}
    assert manual["Ascend910-3"].fault_codes == ("80CB8002",)
    assert manual["Ascend910-4"].fault_codes == ()
    assert all(f.level == levels.L6 for f in manual.values())


def test_other_resource_names_are_read() -> None:
    # A5 publishes huawei.com/npu-Fault; the card name format is the resolver's business.
    faults, problems = parse_configmap(device_info_cfg(device_info_text(A5_CARDS)), node_name=NODE)
    assert problems == []
    assert [(f.npu_name, f.level) for f in faults] == [("npu-1", levels.L6)]


def test_empty_fault_list_means_no_faults() -> None:
    text = device_info_cfg(device_info_text(device_list(faults=[], available="Ascend910-0,Ascend910-1")))
    assert parse_configmap(text, node_name=NODE) == ([], [])


def test_one_bad_fault_list_does_not_hide_another() -> None:
    info = (
        '{"DeviceList":{"huawei.com/Ascend310P-Fault":"[{\\"fault_type\\":","huawei.com/Ascend910-Fault":'
        + json.dumps(FAULT_LIST_TEXT) + ',"huawei.com/npu-Fault":"{}"},"UpdateTime":-4}'
    )
    faults, problems = parse_configmap(device_info_cfg(info), node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 3, problems
    assert "UpdateTime=-4" in problems[0]
    assert '"huawei.com/Ascend310P-Fault"' in problems[1] and "not a JSON array" in problems[1]
    assert '"huawei.com/npu-Fault"' in problems[2] and "not a list of faults" in problems[2]


def test_malformed_manual_separation_keys() -> None:
    data = {"DeviceInfoCfg": DEVICE_INFO_CFG, "ManuallySeparateNPU": 3, "UpgradeFaultReason": "{"}
    faults, problems = parse_configmap(data, node_name=NODE)
    assert len(faults) == 5
    assert len(problems) == 2
    assert "UpgradeFaultReason is not JSON" in problems[0]
    assert "ManuallySeparateNPU=3" in problems[1]
