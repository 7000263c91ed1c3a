"""Fault injection: kubelet-style mounted ConfigMaps and ReportHardwareFault requests."""

from __future__ import annotations

import json
import os

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels
from motor.controller.hardware.checkcode import device_info_check_code
from motor.controller.hardware.inject import (
    build_configmap,
    build_device_info_cfg,
    build_report_request,
    write_configmap_fault,
)
from motor.controller.hardware.model import HardwareFault, HardwareFaultError
from motor.controller.hardware.parser import parse_configmap

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
    assert dl["huawei.com/Ascend910-Unhealthy"] == "Ascend910-2,Ascend910-10"
    assert dl["huawei.com/Ascend910-NetworkUnhealthy"] == "Ascend910-3"
    assert dl["huawei.com/Ascend910"].startswith("Ascend910-0,Ascend910-1,Ascend910-4,")
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


def test_node_fault_is_written_as_mindcluster_does() -> None:
    node = HardwareFault("node-a", "", ("heartbeatTimeOut",), levels.L6, "NodeUnhealthy", "", 1760000003.0)
    entry = json.loads(json.loads(build_device_info_cfg([node]))["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"])[0]
    assert (entry["npu_name"], entry["fault_handling"], entry["fault_level"]) == ("", "", "")
    faults, _ = parse_configmap(build_configmap("node-a", [node]))
    assert faults[0].level == levels.L6 and faults[0].whole_node


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


def test_report_request_from_names_and_levels() -> None:
    req = build_report_request("node-a", "Ascend910-3", "80e18402", "SeparateNPU")
    assert (req.level, req.fault_handling, req.fault_type, req.source) == (
        controller_pb2.FAULT_LEVEL_L6, "SeparateNPU", "CardUnhealthy", "motorctl")
    assert build_report_request("node-a", "Ascend910-3", "80CB8002", "L4").fault_handling == "FreeRestartNPU"
    assert build_report_request("node-a", level=controller_pb2.FAULT_LEVEL_L5).fault_type == "NodeUnhealthy"
    pre = build_report_request("node-a", "Ascend910-3", "81078603", "PreSeparateNPU")
    assert (pre.level, pre.fault_handling) == (controller_pb2.FAULT_LEVEL_L1, "PreSeparateNPU")


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
