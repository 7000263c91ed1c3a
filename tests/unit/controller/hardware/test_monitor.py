"""ResourceMonitor: its sources from config, one intake for all of them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from motor.controller.config import HardwareMonitorConfig
from motor.controller.hardware.injection.configmaps import write_configmap_fault
from motor.controller.hardware.injection.report_request import build_report_request
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.monitor import HardwareMonitorError, ResourceMonitor
from motor.controller.hardware.sources.kube_api import KubeUnavailable
from motor.controller.hardware.sources.rpc import SourceNotStarted

from .support import LOST, RESET, FakeKubeApi, fault_keys, wait_until


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
        assert fault_keys(calls[0]) == {LOST.key}
        assert "fault intake failed" in caplog.text  # logged, source kept running
        write_configmap_fault(tmp_path, "node-a", [LOST, RESET])
        await wait_until(lambda: len(calls) >= 2, "the second delivery")
        assert fault_keys(calls[1]) == {RESET.key}
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
