"""DirectoryConfigMapSource: MindCluster ConfigMaps mounted as files, polled."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.injection.configmaps import build_configmap, write_configmap_fault, write_nodeinfo_fault
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.directory import DirectoryConfigMapSource

from ..samples import full_data
from ..support import LOST, NODED, OTHER, RESET, Clock, Sink, fault_keys


def test_directory_scan_delivers_only_new_or_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="motor.controller.hardware")
    source = DirectoryConfigMapSource(tmp_path, poll_interval_sec=1.0)
    write_configmap_fault(tmp_path, "node-a", [LOST])
    assert fault_keys(source.scan()) == {LOST.key}
    assert source.scan() == []  # nothing changed
    write_configmap_fault(tmp_path, "node-a", [LOST])  # rewritten (new generation), same content
    assert source.scan() == []
    write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
    assert fault_keys(source.scan()) == {RESET.key}
    again = HardwareFault(**{**LOST.__dict__, "fault_time_unix_sec": 1760000099.0})
    write_configmap_fault(tmp_path, "node-a", [again, RESET])  # it happened again
    assert [f.fault_time_unix_sec for f in source.scan()] == [1760000099.0]
    write_configmap_fault(tmp_path, "node-a", [RESET])  # LOST recovered
    assert source.scan() == []
    assert "hardware fault cleared node=node-a npu=Ascend910-2" in caplog.text
    write_configmap_fault(tmp_path, "node-a", [again, RESET])  # and came back
    assert fault_keys(source.scan()) == {LOST.key}


def test_directory_reads_several_nodes_and_layouts(tmp_path: Path) -> None:
    write_configmap_fault(tmp_path, "node-a", [LOST])
    # A projected item / kubectl dump: one file per ConfigMap, whole object or bare DeviceInfoCfg.
    (tmp_path / "mindx-dl-deviceinfo-node-b.json").write_text(json.dumps(build_configmap("node-b", [OTHER])))
    (tmp_path / "mindx-dl-deviceinfo-worker-7").write_text(full_data()["DeviceInfoCfg"])
    (tmp_path / "unrelated.txt").write_text("x")
    (tmp_path / ".mindx-dl-deviceinfo-hidden").write_text("x")
    faults = DirectoryConfigMapSource(tmp_path).scan()
    by_node: dict[str, int] = {}
    for f in faults:
        by_node[f.node_name] = by_node.get(f.node_name, 0) + 1
    assert by_node == {"node-a": 1, "node-b": 1, "worker-7": 5}
    assert all(f.source.startswith(f"configmap:{tmp_path}/mindx-dl-deviceinfo-") for f in faults)


def test_directory_keeps_known_faults_when_a_document_turns_unreadable(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "mindx-dl-deviceinfo-node-b"
    path.write_text(json.dumps(build_configmap("node-b", [OTHER])))
    source = DirectoryConfigMapSource(tmp_path)
    assert fault_keys(source.scan()) == {OTHER.key}
    path.write_text('{"DeviceInfo": {"DeviceList"')  # a half-written file
    caplog.set_level(logging.WARNING, logger="motor.controller.hardware")
    assert source.scan() == []
    assert "node=node-b" in caplog.text and "not JSON" in caplog.text
    path.write_text(json.dumps(build_configmap("node-b", [OTHER])))
    assert source.scan() == []  # it was never forgotten, so it is not new


def test_directory_forgets_removed_documents(tmp_path: Path) -> None:
    source = DirectoryConfigMapSource(tmp_path)
    folder = write_configmap_fault(tmp_path, "node-a", [LOST])
    assert len(source.scan()) == 1
    for child in sorted(folder.iterdir(), reverse=True):
        if child.is_symlink() or child.is_file():
            child.unlink()
        else:
            for f in child.iterdir():
                f.unlink()
            child.rmdir()
    folder.rmdir()
    assert source.scan() == []
    write_configmap_fault(tmp_path, "node-a", [LOST])
    assert len(source.scan()) == 1


def test_directory_missing_then_present(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "not-yet"
    source = DirectoryConfigMapSource(root)
    caplog.set_level(logging.WARNING, logger="motor.controller.hardware")
    assert source.scan() == [] and source.scan() == []
    assert caplog.text.count("unreadable") == 1  # said once, not every poll
    write_configmap_fault(root, "node-a", [LOST])
    assert len(source.scan()) == 1


def test_directory_bounds(tmp_path: Path) -> None:
    (tmp_path / "mindx-dl-deviceinfo-big").write_text("x" * 2048)
    write_configmap_fault(tmp_path, "node-a", [LOST])
    write_configmap_fault(tmp_path, "node-b", [OTHER])
    source = DirectoryConfigMapSource(tmp_path, max_documents=2, max_file_bytes=1024 * 1024)
    assert fault_keys(source.scan()) == {LOST.key}  # node-b is the third document
    small = DirectoryConfigMapSource(tmp_path, max_file_bytes=64)
    assert small.scan() == []  # every file above the bound is ignored
    with pytest.raises(ValueError, match="poll_interval_sec=0"):
        DirectoryConfigMapSource(tmp_path, poll_interval_sec=0)


async def test_directory_source_polls_and_stops(tmp_path: Path) -> None:
    write_configmap_fault(tmp_path, "node-a", [LOST])
    sink = Sink()
    source = DirectoryConfigMapSource(tmp_path, poll_interval_sec=0.02)
    await source.start(sink)
    assert fault_keys(sink.faults) == {LOST.key}  # delivered before start returned
    write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
    assert fault_keys(await sink.next_batch()) == {RESET.key}
    task = source._task
    await source.stop()
    assert task is not None and task.done()
    await source.stop()  # idempotent


def test_directory_reads_noded_and_switch_documents(tmp_path: Path) -> None:
    clock = Clock()
    source = DirectoryConfigMapSource(tmp_path, clock=clock)
    write_nodeinfo_fault(tmp_path, "node-a", [NODED])
    switch = HardwareFault("node-b", "", ("00F103B0",), levels.L6, "SwitchFault", "Separate", 1760000005.0)
    write_configmap_fault(tmp_path, "node-b", [switch])
    got = {f.node_name: f for f in source.scan()}
    assert set(got) == {"node-a", "node-b"}
    assert (got["node-a"].fault_handling, got["node-a"].whole_node, got["node-a"].level) == ("SeparateFault", True, levels.L6)
    assert got["node-a"].fault_time_unix_sec == clock.now  # NodeD gives no time: stamped at first sighting
    assert got["node-b"].fault_time_unix_sec == 1760000005.0 and got["node-b"].fault_type == "SwitchFault"
    assert source.scan() == []


def test_faults_without_time_are_news_once_per_appearance(tmp_path: Path) -> None:
    clock = Clock()
    source = DirectoryConfigMapSource(tmp_path, clock=clock)
    ring = ["Ascend910-0", "Ascend910-1"]
    write_configmap_fault(tmp_path, "node-a", [], cards=ring, recovering=ring)
    first = source.scan()
    assert {(f.npu_name, f.fault_type, f.fault_time_unix_sec) for f in first} == {
        ("Ascend910-0", "CardRecovering", clock.now), ("Ascend910-1", "CardRecovering", clock.now)}
    clock.now += 30
    write_configmap_fault(tmp_path, "node-a", [], cards=ring, recovering=ring)  # refreshed, still resetting
    assert source.scan() == []
    write_configmap_fault(tmp_path, "node-a", [], cards=ring)  # reset done
    assert source.scan() == []
    clock.now += 30
    write_configmap_fault(tmp_path, "node-a", [], cards=ring, recovering=ring[:1])  # reset again later
    (again,) = source.scan()
    assert (again.npu_name, again.fault_time_unix_sec) == ("Ascend910-0", clock.now)  # news again, not "seen"
