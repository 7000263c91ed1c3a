"""Fault injection as kubelet-style mounted ConfigMaps and Kubernetes objects, in MindCluster's real formats."""

from __future__ import annotations

import json
import os

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.formats.check_code import device_info_check_code
from motor.controller.hardware.formats.configmap import parse_configmap
from motor.controller.hardware.injection.configmaps import (
    build_configmap,
    build_device_info_cfg,
    build_nodeinfo_configmap,
    write_configmap_fault,
    write_nodeinfo_fault,
)
from motor.controller.hardware.model import HardwareFault, HardwareFaultError

CARDS = [f"Ascend910-{i}" for i in range(16)]
LOST = HardwareFault("node-a", "Ascend910-10", ("80E18402", "A8028801"), levels.L6, "CardUnhealthy", "SeparateNPU", 1760000000.25)
RESET = HardwareFault("node-a", "Ascend910-2", ("80CB8002",), levels.L5, "CardUnhealthy", "", 1760000001.0)
LINK = HardwareFault("node-a", "Ascend910-3", ("81078603",), levels.L1, "CardNetworkUnhealthy", "PreSeparateNPU", 1760000002.0)


def test_device_info_cfg_is_the_real_format() -> None:
    cfg = json.loads(build_device_info_cfg([LOST, RESET, LINK], cards=CARDS, update_time_sec=1760000100))
    assert set(cfg) == {"DeviceInfo", "SuperPodID", "ServerIndex", "CheckCode"}
    info = cfg["DeviceInfo"]
    assert info["UpdateTime"] == 1760000100
    dl = info["DeviceList"]
    assert list(dl) == sorted(dl)
    # Joined from sorted sets, as the plugin's ToString does (sets.String.List: text order).
    assert dl["huawei.com/Ascend910-Unhealthy"] == "Ascend910-10,Ascend910-2"
    assert dl["huawei.com/Ascend910-NetworkUnhealthy"] == "Ascend910-3"
    assert dl["huawei.com/Ascend910-Recovering"] == ""
    assert dl["huawei.com/Ascend910"].startswith("Ascend910-0,Ascend910-1,Ascend910-11,")
    entries = json.loads(dl["huawei.com/Ascend910-Fault"])
    assert list(entries[0]) == ["fault_type", "npu_name", "large_model_fault_level", "fault_level", "fault_handling",
                                "fault_code", "fault_time_and_level_map"]
    assert entries[0]["fault_time_and_level_map"]["80E18402"] == {"fault_time": 1760000000250, "fault_level": "SeparateNPU"}
    assert entries[1]["fault_handling"] == "RestartNPU"  # canonical name of the level when none given
    assert cfg["CheckCode"] == device_info_check_code(info)


def test_round_trip_through_the_parser() -> None:
    faults, problems = parse_configmap(build_configmap("node-a", [LOST, RESET, LINK], cards=CARDS))
    assert problems == []
    got = {f.key: f for f in faults}
    assert got[LOST.key].level == levels.L6 and got[LOST.key].fault_time_unix_sec == pytest.approx(LOST.fault_time_unix_sec)
    assert got[RESET.key].level == levels.L5 and got[RESET.key].fault_handling == "RestartNPU"
    assert got[LINK.key].level == levels.L1 and got[LINK.key].fault_handling == "PreSeparateNPU"


def test_a5_cards_go_under_huawei_com_npu() -> None:
    lost = HardwareFault("node-a", "npu-1", ("80E18402",), levels.L6, "CardUnhealthy", "SeparateNPU", 1760000000.0)
    dl = json.loads(build_device_info_cfg([lost], cards=[f"npu-{i}" for i in range(4)]))["DeviceInfo"]["DeviceList"]
    assert sorted(dl) == ["huawei.com/npu", "huawei.com/npu-Fault", "huawei.com/npu-NetworkUnhealthy",
                          "huawei.com/npu-Recovering", "huawei.com/npu-Unhealthy"]
    assert dl["huawei.com/npu"] == "npu-0,npu-2,npu-3" and dl["huawei.com/npu-Unhealthy"] == "npu-1"
    faults, problems = parse_configmap(build_configmap("node-a", [lost]))
    assert problems == [] and [f.key for f in faults] == [lost.key]


def test_hot_reset_is_written_with_the_recovering_list() -> None:
    faults, problems = parse_configmap(build_configmap("node-a", [RESET], cards=CARDS[:4],
                                                       recovering=["Ascend910-0", "Ascend910-1", "Ascend910-2", "Ascend910-3"]))
    assert problems == []
    assert {(f.npu_name, f.fault_type) for f in faults} == {
        ("Ascend910-0", "CardRecovering"), ("Ascend910-1", "CardRecovering"), ("Ascend910-2", "CardUnhealthy"),
        ("Ascend910-3", "CardRecovering")}


def test_node_faults_are_published_by_the_switch_or_noded(tmp_path) -> None:
    node = HardwareFault("node-a", "", ("00F103B0",), levels.L6, "SwitchFault", "Separate", 1760000003.0)
    with pytest.raises(HardwareFaultError, match="the device plugin lists cards only"):
        build_device_info_cfg([node])
    cm = build_configmap("node-a", [node, RESET])
    switch = json.loads(cm["data"]["SwitchInfoCfg"])
    assert (switch["FaultLevel"], switch["NodeStatus"]) == ("Separate", "UnHealthy")
    assert json.loads(switch["FaultCode"][0])["AssembledFaultCode"] == "[0x00f103b0,na,cpu,na]"
    faults, problems = parse_configmap(cm)
    assert problems == []
    (got,) = [f for f in faults if f.whole_node]
    assert (got.fault_codes, got.level, got.fault_handling, got.fault_time_unix_sec) == (
        ("00F103B0",), levels.L6, "Separate", 1760000003.0)

    noded = HardwareFault("node-a", "", ("0C000025",), levels.L6, "NodeDFault:CPU", "", 0.0)
    obj = build_nodeinfo_configmap("node-a", [noded])
    assert obj["metadata"] == {"name": "mindx-dl-nodeinfo-node-a", "namespace": "mindx-dl",
                               "labels": {"mx-consumer-cim": "true"}}
    cm_text = json.loads(obj["data"]["NodeInfo"])
    assert cm_text["NodeInfo"]["NodeStatus"] == "UnHealthy"
    assert cm_text["NodeInfo"]["FaultDevList"] == [
        {"DeviceType": "CPU", "DeviceId": 0, "FaultCode": ["0C000025"], "FaultLevel": "SeparateFault"}]
    faults, problems = parse_configmap(obj)
    assert problems == [] and [(f.fault_codes, f.level, f.fault_handling) for f in faults] == [
        (("0C000025",), levels.L6, "SeparateFault")]

    folder = write_nodeinfo_fault(tmp_path, "node-a", [noded])
    assert folder == tmp_path / "mindx-dl-nodeinfo-node-a"
    assert os.readlink(folder / "NodeInfo") == "..data/NodeInfo" and (folder / "updateTime").exists()
    assert write_nodeinfo_fault(tmp_path, "node-a", []) == folder and not folder.exists()  # NodeD deletes it


def test_a_level_a_source_cannot_write_is_refused() -> None:
    lost = HardwareFault("node-a", "", ("0C000025",), levels.L4, "NodeDFault:CPU", "", 0.0)
    with pytest.raises(HardwareFaultError, match="cannot be published by nodeinfo"):
        build_nodeinfo_configmap("node-a", [lost])
    with pytest.raises(HardwareFaultError, match="cannot be published by switch"):
        build_configmap("node-a", [lost])


def test_manually_separated_cards() -> None:
    cm = build_configmap("node-a", [], manually_separated=["Ascend910-9", "Ascend910-1"])
    assert cm["data"]["ManuallySeparateNPU"] == "Ascend910-1,Ascend910-9"
    faults, _ = parse_configmap(cm)
    assert [(f.npu_name, f.level) for f in faults] == [("Ascend910-1", levels.L6), ("Ascend910-9", levels.L6)]


def test_write_lays_out_a_kubelet_mount(tmp_path) -> None:
    folder = write_configmap_fault(tmp_path, "node-a", [LOST], cards=CARDS)
    assert folder == tmp_path / "mindx-dl-deviceinfo-node-a"
    data_link = folder / "..data"
    assert data_link.is_symlink() and os.readlink(data_link).startswith("..")
    assert os.readlink(folder / "DeviceInfoCfg") == "..data/DeviceInfoCfg"
    first_target = os.readlink(data_link)
    faults, problems = parse_configmap((folder / "DeviceInfoCfg").read_text(), node_name="node-a")
    assert problems == [] and [f.key for f in faults] == [LOST.key]

    write_configmap_fault(tmp_path, "node-a", [LOST, RESET], cards=CARDS)
    assert os.readlink(data_link) != first_target
    assert not (folder / first_target).exists()  # the old generation is removed
    hidden = sorted(p.name for p in folder.iterdir() if p.name.startswith(".."))
    assert len(hidden) == 2  # ..data and one timestamped folder
    faults, _ = parse_configmap((folder / "DeviceInfoCfg").read_text(), node_name="node-a")
    assert {f.key for f in faults} == {LOST.key, RESET.key}

    write_configmap_fault(tmp_path, "node-a", [])
    assert parse_configmap((folder / "DeviceInfoCfg").read_text(), node_name="node-a") == ([], [])


def test_write_refuses_a_fault_of_another_node(tmp_path) -> None:
    with pytest.raises(HardwareFaultError, match="not on node node-b"):
        write_configmap_fault(tmp_path, "node-b", [LOST])
