"""`motorctl hw-fault` with every source and the issue's card names and levels (mounted ConfigMaps)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from motor.cli.motorctl import run
from motor.controller.hardware import levels
from motor.controller.hardware.formats.configmap import parse_configmap


def _hw(*argv: str) -> str:
    out = io.StringIO()
    assert run(["hw-fault", *argv], out=out) == 0
    return out.getvalue().strip()


def _read(folder: Path, key: str) -> str:
    return (folder / key).read_text()


def test_a5_card_is_written_under_huawei_com_npu(tmp_path: Path) -> None:
    answer = _hw("node-a", "npu-1", "--level", "SeparateNPU", "--configmap-dir", str(tmp_path))
    folder = tmp_path / "mindx-dl-deviceinfo-node-a"
    assert answer == f"wrote {folder}"
    device_list = json.loads(_read(folder, "DeviceInfoCfg"))["DeviceInfo"]["DeviceList"]
    assert "huawei.com/npu-Fault" in device_list and device_list["huawei.com/npu-Unhealthy"] == "npu-1"
    faults, problems = parse_configmap(_read(folder, "DeviceInfoCfg"), node_name="node-a")
    assert problems == [] and [(f.npu_name, f.level) for f in faults] == [("npu-1", levels.L6)]


def test_switch_separate_is_written_to_switch_info(tmp_path: Path) -> None:
    _hw("node-a", "--via", "switch", "--level", "Separate", "--code", "00F103B0", "--configmap-dir", str(tmp_path))
    folder = tmp_path / "mindx-dl-deviceinfo-node-a"
    faults, problems = parse_configmap({k: _read(folder, k) for k in ("DeviceInfoCfg", "SwitchInfoCfg")}, node_name="node-a")
    assert problems == []
    assert [(f.npu_name, f.fault_codes, f.level, f.fault_type) for f in faults] == [
        ("", ("00F103B0",), levels.L6, "SwitchFault")]


def test_node_fault_defaults_to_noded(tmp_path: Path) -> None:
    _hw("node-a", "--level", "SeparateFault", "--code", "0C000025", "--configmap-dir", str(tmp_path))
    folder = tmp_path / "mindx-dl-nodeinfo-node-a"
    faults, problems = parse_configmap(_read(folder, "NodeInfo"), node_name="node-a", kind="nodeinfo")
    assert problems == [] and [(f.whole_node, f.level, f.fault_handling) for f in faults] == [
        (True, levels.L6, "SeparateFault")]


def test_operator_resource_name(tmp_path: Path) -> None:
    _hw("node-a", "custom910-3", "--level", "L5", "--resource", "vendor.io/accel910", "--configmap-dir", str(tmp_path))
    device_list = json.loads(_read(tmp_path / "mindx-dl-deviceinfo-node-a", "DeviceInfoCfg"))["DeviceInfo"]["DeviceList"]
    assert device_list["vendor.io/accel910-Unhealthy"] == "custom910-3"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["node-a", "--via", "switch", "--level", "RestartNPU"], "cannot be published by switch"),
        (["node-a", "npu-1", "--via", "nodeinfo"], "the device plugin lists cards"),
        (["node-a", "--level", "L4"], "cannot be published by nodeinfo"),
        (["node-a", "npu-1", "--level", "Explode"], "level='Explode'"),
    ],
)
def test_what_a_source_cannot_write_is_refused(tmp_path: Path, argv: list[str], needle: str) -> None:
    with pytest.raises(SystemExit, match=needle):
        run(["hw-fault", *argv, "--configmap-dir", str(tmp_path)])
