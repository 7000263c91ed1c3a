"""ResourceMonitor and its sources: mounted-ConfigMap directory, RPC, Kubernetes event handling and
list+watch (with a fake API of plain dicts; no cluster)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gen.motor.v1 import controller_pb2
from motor.common.config import HardwareMonitorConfig
from motor.controller.hardware import levels
from motor.controller.hardware.directory_source import DirectoryConfigMapSource
from motor.controller.hardware.inject import (
    build_configmap,
    build_nodeinfo_configmap,
    write_configmap_fault,
    write_nodeinfo_fault,
)
from motor.controller.hardware.inject_rpc import build_report_request
from motor.controller.hardware.kube import KubernetesConfigMapSource
from motor.controller.hardware.kube_api import KubeUnavailable
from motor.controller.hardware.model import HardwareFault, HardwareFaultError
from motor.controller.hardware.monitor import HardwareMonitorError, ResourceMonitor
from motor.controller.hardware.resolver import TopologyResolver
from motor.controller.hardware.rpc_source import RpcSource, SourceNotStarted
from motor.testing.waits import async_wait_for

from .hw_samples import NODE_READY, configmap_object, full_data, node_not_ready

LOST = HardwareFault("node-a", "Ascend910-2", ("80E18402",), levels.L6, "CardUnhealthy", "SeparateNPU", 1760000000.0)
RESET = HardwareFault("node-a", "Ascend910-5", ("80CB8002",), levels.L5, "CardUnhealthy", "RestartNPU", 1760000010.0)
OTHER = HardwareFault("node-b", "Ascend910-0", ("80CB8002",), levels.L5, "CardUnhealthy", "RestartNPU", 1760000020.0)
WAIT_SEC = 5.0


def _keys(faults: list[HardwareFault]) -> set[tuple[tuple[str, ...], str, str]]:
    return {f.key for f in faults}


class Sink:
    """Collects delivered batches; lets a test wait (bounded) for the next one."""

    def __init__(self) -> None:
        self.batches: list[list[HardwareFault]] = []
        self._event = asyncio.Event()

    def __call__(self, faults: list[HardwareFault]) -> None:
        self.batches.append(list(faults))
        self._event.set()

    @property
    def faults(self) -> list[HardwareFault]:
        return [f for batch in self.batches for f in batch]

    async def next_batch(self) -> list[HardwareFault]:
        self._event.clear()
        await asyncio.wait_for(self._event.wait(), WAIT_SEC)
        return self.batches[-1]


# --- directory of mounted ConfigMaps ---------------------------------------------------------


def test_directory_scan_delivers_only_new_or_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="motor.controller.hardware")
    source = DirectoryConfigMapSource(tmp_path, poll_interval_sec=1.0)
    write_configmap_fault(tmp_path, "node-a", [LOST])
    assert _keys(source.scan()) == {LOST.key}
    assert source.scan() == []  # nothing changed
    write_configmap_fault(tmp_path, "node-a", [LOST])  # rewritten (new generation), same content
    assert source.scan() == []
    write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
    assert _keys(source.scan()) == {RESET.key}
    again = HardwareFault(**{**LOST.__dict__, "fault_time_unix_sec": 1760000099.0})
    write_configmap_fault(tmp_path, "node-a", [again, RESET])  # it happened again
    assert [f.fault_time_unix_sec for f in source.scan()] == [1760000099.0]
    write_configmap_fault(tmp_path, "node-a", [RESET])  # LOST recovered
    assert source.scan() == []
    assert "hardware fault cleared node=node-a npu=Ascend910-2" in caplog.text
    write_configmap_fault(tmp_path, "node-a", [again, RESET])  # and came back
    assert _keys(source.scan()) == {LOST.key}


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
    assert _keys(source.scan()) == {OTHER.key}
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
    assert _keys(source.scan()) == {LOST.key}  # node-b is the third document
    small = DirectoryConfigMapSource(tmp_path, max_file_bytes=64)
    assert small.scan() == []  # every file above the bound is ignored
    with pytest.raises(ValueError, match="poll_interval_sec=0"):
        DirectoryConfigMapSource(tmp_path, poll_interval_sec=0)


async def test_directory_source_polls_and_stops(tmp_path: Path) -> None:
    write_configmap_fault(tmp_path, "node-a", [LOST])
    sink = Sink()
    source = DirectoryConfigMapSource(tmp_path, poll_interval_sec=0.02)
    await source.start(sink)
    assert _keys(sink.faults) == {LOST.key}  # delivered before start returned
    write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
    assert _keys(await sink.next_batch()) == {RESET.key}
    task = source._task
    await source.stop()
    assert task is not None and task.done()
    await source.stop()  # idempotent


# --- RPC ----------------------------------------------------------------------------------


async def test_rpc_source_validates_and_delivers() -> None:
    sink = Sink()
    source = RpcSource(clock=lambda: 1760000500.0)
    with pytest.raises(SourceNotStarted, match="not running"):
        await source.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))
    await source.start(sink)
    fault = await source.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))
    assert sink.batches == [[fault]]
    assert fault.fault_time_unix_sec == 1760000500.0 and fault.source == "motorctl"
    bad = controller_pb2.ReportHardwareFaultRequest(node_name="node-a", npu_name="Ascend910-2", level=0)
    with pytest.raises(HardwareFaultError, match="level=FAULT_LEVEL_UNSPECIFIED"):
        await source.report(bad)
    assert len(sink.batches) == 1


# --- ResourceMonitor ------------------------------------------------------------------------


class FakeKubeApi:
    """KubeApi of plain dicts: scripted list results and watch streams, recorded calls."""

    def __init__(self) -> None:
        self.configmaps: list[dict[str, Any]] = []
        self.nodeinfos: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []
        self.cm_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.nodeinfo_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.node_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.calls: list[str] = []
        self.fail_next_list = 0
        self.stopped = threading.Event()

    def list_configmaps(self, namespace: str) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(f"list cm {namespace}")
        if namespace == "mindx-dl":
            return [c for c in self.nodeinfos], "300"
        if self.fail_next_list:
            self.fail_next_list -= 1
            raise ConnectionError("apiserver unreachable")
        return list(self.configmaps), "100"

    def watch_configmaps(self, namespace: str, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        if namespace == "mindx-dl":
            self.calls.append(f"watch nodeinfo {resource_version}")
            return self._stream(self.nodeinfo_watches)
        self.calls.append(f"watch cm {resource_version}")
        return self._stream(self.cm_watches)

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        self.calls.append("list nodes")
        return list(self.nodes), "200"

    def watch_nodes(self, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        self.calls.append(f"watch nodes {resource_version}")
        return self._stream(self.node_watches)

    def _stream(self, scripted: list[list[tuple[str, dict[str, Any]]]]) -> Iterator[tuple[str, dict[str, Any]]]:
        if scripted:
            yield from scripted.pop(0)
            return
        # Nothing scripted: a quiet watch that ends when stopped (or after a bound).
        self.stopped.wait(WAIT_SEC)

    def stop(self) -> None:
        self.stopped.set()


def _fake_loader(api: FakeKubeApi):
    return lambda: (api, "fake config")


def _unavailable():
    raise KubeUnavailable("no kubeconfig at ~/.kube/config")


def test_monitor_sources_from_config(tmp_path: Path) -> None:
    off = ResourceMonitor.from_config(HardwareMonitorConfig(kubernetes="off"))
    assert [type(s).__name__ for s in off.sources] == ["RpcSource"]
    auto = ResourceMonitor.from_config(
        HardwareMonitorConfig(configmap_dir=str(tmp_path), poll_interval_sec=0.5), kube_loader=_unavailable
    )
    assert [type(s).__name__ for s in auto.sources] == ["RpcSource", "DirectoryConfigMapSource"]
    with_k8s = ResourceMonitor.from_config(HardwareMonitorConfig(kubernetes="on"), kube_loader=_fake_loader(FakeKubeApi()))
    assert [type(s).__name__ for s in with_k8s.sources] == ["RpcSource", "KubernetesConfigMapSource"]
    with pytest.raises(HardwareMonitorError, match="hardware_monitor.kubernetes='on' but no kubeconfig"):
        ResourceMonitor.from_config(HardwareMonitorConfig(kubernetes="on"), kube_loader=_unavailable)


def test_default_loader_reports_why_kubernetes_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Without the client package (or without any config) "auto" quietly leaves the source out.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monitor = ResourceMonitor.from_config(HardwareMonitorConfig())
    assert [type(s).__name__ for s in monitor.sources] == ["RpcSource"]


async def test_monitor_funnels_sources_and_survives_a_failing_intake(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_configmap_fault(tmp_path, "node-a", [LOST])
    calls: list[list[HardwareFault]] = []

    async def intake(faults: list[HardwareFault]) -> None:
        calls.append(faults)
        if len(calls) == 1:
            raise RuntimeError("fault manager busy")

    caplog.set_level(logging.INFO, logger="motor.controller.hardware")
    monitor = ResourceMonitor.from_config(
        HardwareMonitorConfig(configmap_dir=str(tmp_path), poll_interval_sec=0.02, kubernetes="off")
    )
    await monitor.start(intake)
    try:
        assert _keys(calls[0]) == {LOST.key}
        assert "fault intake failed" in caplog.text  # logged, source kept running
        write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
        await async_wait_for(lambda: len(calls) >= 2, WAIT_SEC, "the second delivery", interval_sec=0.01)
        assert _keys(calls[1]) == {RESET.key}
        rpc_fault = await monitor.rpc.report(build_report_request("node-b", "Ascend910-0", "80CB8002", "RestartNPU"))
        assert calls[-1] == [rpc_fault]
    finally:
        await monitor.stop()
    assert "hardware fault node=node-a npu=Ascend910-2 codes=80E18402 level=L6" in caplog.text


async def test_monitor_rpc_intake_errors_reach_the_caller() -> None:
    def intake(faults: list[HardwareFault]) -> None:
        raise RuntimeError("refused")

    monitor = ResourceMonitor.from_config(HardwareMonitorConfig(kubernetes="off"))
    await monitor.start(intake)
    try:
        with pytest.raises(RuntimeError, match="refused"):
            await monitor.rpc.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))
    finally:
        await monitor.stop()
    with pytest.raises(SourceNotStarted):
        await monitor.rpc.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))


# --- Kubernetes: event handling on plain dicts ---------------------------------------------------


def _cm(node: str, faults: list[HardwareFault], rv: str = "1") -> dict[str, Any]:
    obj = build_configmap(node, faults)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_configmap_events() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert _keys(source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))) == {LOST.key}
    assert source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST], rv="2")) == []  # refresh only
    assert _keys(source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST, RESET], rv="3"))) == {RESET.key}
    fresh = source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST, RESET], rv="3"))
    assert fresh == []
    assert source.handle_configmap_event("BOOKMARK", {"metadata": {"resourceVersion": "9"}}) == []
    other = configmap_object("node-x", full_data())
    other["metadata"]["name"] = "coredns"
    assert source.handle_configmap_event("ADDED", other) == []  # not a device-info ConfigMap
    assert source.handle_configmap_event("DELETED", _cm("node-a", [])) == []
    (back,) = source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))  # new again
    assert back.key == LOST.key and back.source == "k8s:configmap/kube-system/mindx-dl-deviceinfo-node-a"


def test_configmap_sync_forgets_what_disappeared() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert _keys(source.handle_configmap_sync([_cm("node-a", [LOST]), _cm("node-b", [OTHER])])) == {LOST.key, OTHER.key}
    assert source.handle_configmap_sync([_cm("node-b", [OTHER])]) == []  # node-a's ConfigMap is gone
    assert _keys(source.handle_configmap_sync([_cm("node-a", [LOST]), _cm("node-b", [OTHER])])) == {LOST.key}


def test_unreadable_configmap_keeps_known_faults() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))
    broken = _cm("node-a", [LOST], rv="5")
    broken["data"]["DeviceInfoCfg"] = "{"
    assert source.handle_configmap_event("MODIFIED", broken) == []
    assert source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST], rv="6")) == []


def test_node_events() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert source.handle_node_event("ADDED", NODE_READY) == []
    (down,) = source.handle_node_event("MODIFIED", node_not_ready())
    assert (down.node_name, down.npu_name, down.level, down.source) == ("worker-7", "", levels.L6, "k8s:node/worker-7")
    assert source.handle_node_event("MODIFIED", node_not_ready()) == []  # status heartbeat, same transition
    assert source.handle_node_event("MODIFIED", NODE_READY) == []  # recovered
    again = source.handle_node_event("MODIFIED", node_not_ready(status="False", when="2025-10-09T10:00:00Z"))
    assert len(again) == 1
    assert source.handle_node_event("DELETED", NODE_READY) == []
    assert source.handle_node_sync([node_not_ready(status="False", when="2025-10-09T10:00:00Z")]) != []


# --- Kubernetes: list+watch loop against the fake API ------------------------------------------


async def test_list_then_watch_then_relist_after_410_and_retry_after_failure() -> None:
    api = FakeKubeApi()
    api.fail_next_list = 1  # first list fails: retried after the backoff
    api.configmaps = [_cm("node-a", [LOST])]
    api.nodes = [NODE_READY]
    api.cm_watches = [
        [("MODIFIED", _cm("node-a", [LOST], rv="101")), ("MODIFIED", _cm("node-a", [LOST, RESET], rv="102")),
         ("BOOKMARK", {"metadata": {"resourceVersion": "150"}}),
         ("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})],
    ]
    api.node_watches = [[("MODIFIED", node_not_ready())]]
    sink = Sink()
    source = KubernetesConfigMapSource(api, watch_timeout_sec=5, retry_backoff_sec=0.01)
    await source.start(sink)
    try:
        expected = {LOST.key, RESET.key, (("NodeNotReady",), "", "worker-7")}
        await async_wait_for(lambda: _keys(sink.faults) == expected, WAIT_SEC, "three faults", interval_sec=0.01)
        await async_wait_for(lambda: api.calls.count("watch cm 100") >= 2, WAIT_SEC, "the relist after 410",
                             interval_sec=0.01)
    finally:
        await source.stop()
    cm_calls = [c for c in api.calls if "cm" in c and "mindx-dl" not in c]
    # failed list, list, watch from the list's version, 410 → list again, watch again.
    assert cm_calls[:5] == ["list cm kube-system", "list cm kube-system", "watch cm 100", "list cm kube-system", "watch cm 100"]
    assert "watch nodes 200" in api.calls
    assert api.stopped.is_set()
    # The relist after 410 delivered nothing new: everything was known.
    assert len(sink.faults) == 3


# --- node-level sources and faults without a time of their own ---------------------------------


NODED = HardwareFault("node-a", "", ("0C000025",), levels.L6, "NodeDFault:CPU", "SeparateFault", 0.0)


class Clock:
    def __init__(self, now: float = 1760000000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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


def test_kubernetes_nodeinfo_events_in_their_own_namespace() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi(), clock=Clock())
    noded = build_nodeinfo_configmap("node-a", [NODED])
    (got,) = source.handle_configmap_event("ADDED", noded, "mindx-dl")
    assert got.source == "k8s:configmap/mindx-dl/mindx-dl-nodeinfo-node-a" and got.whole_node
    # Each kind counts in its own namespace only.
    assert source.handle_configmap_event("ADDED", noded, "kube-system") == []
    assert source.handle_configmap_event("ADDED", _cm("node-b", [OTHER]), "mindx-dl") == []
    # NodeD deletes its ConfigMap when the node is healthy again; a device-info sync does not forget it.
    assert source.handle_configmap_sync([_cm("node-b", [OTHER])], "kube-system") != []
    assert source.handle_configmap_sync([noded], "mindx-dl") == []
    assert source.handle_configmap_event("DELETED", noded, "mindx-dl") == []
    (back,) = source.handle_configmap_event("ADDED", noded, "mindx-dl")
    assert back.key == got.key


async def test_list_and_watch_noded_configmaps() -> None:
    api = FakeKubeApi()
    api.nodeinfos = [build_nodeinfo_configmap("node-a", [NODED])]
    later = HardwareFault("node-c", "", ("0C000026",), levels.L6, "NodeDFault:CPU", "SeparateFault", 0.0)
    api.nodeinfo_watches = [[("ADDED", build_nodeinfo_configmap("node-c", [later]))]]
    sink = Sink()
    source = KubernetesConfigMapSource(api, watch_nodes=False, watch_timeout_sec=5, retry_backoff_sec=0.01)
    await source.start(sink)
    try:
        await async_wait_for(lambda: {f.node_name for f in sink.faults} == {"node-a", "node-c"}, WAIT_SEC,
                             "both NodeD faults", interval_sec=0.01)
    finally:
        await source.stop()
    assert "list cm mindx-dl" in api.calls and "watch nodeinfo 300" in api.calls


def test_resolver_from_config_knows_the_operator_prefix() -> None:
    resolver = TopologyResolver.from_config(HardwareMonitorConfig(card_name_prefixes=["custom910-"]))
    assert resolver.is_known_card_name("custom910-3") and resolver.is_known_card_name("npu-3")
    assert not TopologyResolver().is_known_card_name("custom910-3")
