"""The ``motor-nodemanager`` process ends as promised: StopPod answers, stops the engines and exits 0;
with exit_when_all_engines_dead it exits 3 once every engine died (fake-engine processes)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from gen.motor.v1 import node_manager_pb2 as nm, node_manager_pb2_grpc
from motor.common.process import ManagedProcess, group_alive, start_process, stop_process_group
from motor.sim.client import SimClient
from motor.testing.fake_controller import FakeController
from motor.testing.waits import wait_for

from .nm_helpers import INSTANCE, POD_IP, nm_config


pytestmark = pytest.mark.timeout(60)
BIN = Path(sys.executable).parent


@pytest.fixture
def launch(controller: FakeController, tmp_path: Path) -> Iterator:
    started: list[tuple[ManagedProcess, list[int]]] = []

    def start(**overrides: object) -> tuple[ManagedProcess, grpc.Channel, list[int]]:
        cfg = nm_config(controller.address, tmp_path, **overrides)
        path = tmp_path / "nm.json"
        path.write_text(json.dumps(cfg.model_dump(mode="json")))
        ready = tmp_path / "nm.ready.json"
        proc = start_process([str(BIN / "motor-nodemanager"), "--config", str(path), "--ready-file", str(ready)],
                             log_path=tmp_path / "nodemanager.log", name="motor-nodemanager")
        pids: list[int] = []
        started.append((proc, pids))
        info = proc.wait_ready_file(ready, 30, required_keys=["grpc_port"])
        wait_for(lambda: controller.registers, 30, "registration")
        channel = grpc.insecure_channel(f"{POD_IP}:{info['grpc_port']}")
        described = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(nm.DescribePodRequest(), timeout=5)
        pids.extend(e.pid for e in described.engines)
        return proc, channel, [e.endpoint.business_port for e in described.engines]

    try:
        yield start
    finally:
        for proc, pids in started:
            proc.stop(grace_sec=10)
            for pid in pids:
                if pid and group_alive(pid):
                    stop_process_group(pid, grace_sec=2)


def test_stop_pod_answers_stops_engines_and_exits_zero(launch) -> None:  # noqa: ANN001
    proc, channel, _ = launch()
    engine_pids = [e.pid for e in node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(
        nm.DescribePodRequest(), timeout=5).engines]
    resp = node_manager_pb2_grpc.NodeManagerStub(channel).StopPod(
        nm.StopPodRequest(request_id="recycle-7", reason="every local rank retired", instance_id=INSTANCE,
                          pod_ip=POD_IP), timeout=5)
    assert resp.accepted
    channel.close()
    assert proc.wait_exit(20) == 0, proc.log_tail()
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in engine_pids)
    assert "StopPod" in proc.log_tail(60)


def test_all_engines_dead_exits_three(launch) -> None:  # noqa: ANN001
    proc, channel, ports = launch(exit_when_all_engines_dead=True)
    channel.close()
    for port in ports:
        SimClient(f"http://{POD_IP}:{port}").request("POST", "/fake/exit", {"code": 1})
    assert proc.wait_exit(20) == 3, proc.log_tail()
    assert "exit_when_all_engines_dead" in proc.log_tail(60)
