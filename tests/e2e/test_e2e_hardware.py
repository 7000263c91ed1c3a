"""RFC §8 hardware rows over real processes. Faults arrive as mounted MindCluster ConfigMap files in
the controller's watched directory (the ResourceMonitor's directory source) or through the
ReportHardwareFault RPC (motorctl hw-fault); cards are Ascend910-<index on the pod>, nodes
node-<pod ip>."""

from __future__ import annotations

import io
import time

import pytest

from motor.cli.motorctl import run as motorctl
from motor.launch.load import trigger_traffic

def decision(txn: dict) -> dict:
    return next(e for e in txn["events"] if e["event_kind"] == "DECISION")


pytestmark = pytest.mark.timeout(240)


def _hardware_cluster(start_cluster, run_dir):
    cm_dir = run_dir / "configmaps"
    cm_dir.mkdir(exist_ok=True)
    cluster = start_cluster(controller_overrides={
        "hardware_monitor.configmap_dir": str(cm_dir),
        "hardware_monitor.poll_interval_sec": 0.3,
        "hardware_monitor.kubernetes": "off",
        "fault_tolerance_config.software_status_collection_timeout_sec": 30.0,
    })
    return cluster, cm_dir


def _hw_fault(artifacts, *argv: str) -> str:
    out = io.StringIO()
    assert motorctl(list(argv), out=out) == 0
    answer = out.getvalue().strip()
    artifacts.data["injections"].append({"at_unix_sec": time.time(), "command": "motorctl " + " ".join(argv),
                                         "answer": answer})
    return answer


def test_hardware_first_then_ft_perception_scales_down(start_cluster, artifacts, run_dir) -> None:
    cluster, cm_dir = _hardware_cluster(start_cluster, run_dir)
    # Rank 1 is the second card of pod 127.0.0.2.
    _hw_fault(artifacts, "hw-fault", "node-127.0.0.2", "Ascend910-1", "--level", "L5", "--configmap-dir", str(cm_dir))
    time.sleep(0.8)  # the directory source picks it up and opens the 5 s window
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1]
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    applies = [e for e in txn["events"] if e["name"] == "apply"]
    # The apply carries the software DEAD set; the hardware rank only validated it.
    assert applies and all(a["ranks"] == [1] for a in applies)
    # The hardware fault took part: its mapped rank validated the scale-down decision.
    chosen = decision(txn)
    assert chosen["name"] == "scale_down" and chosen["ranks"] == [1] and chosen["hardware_ranks"] == [1]


def test_hardware_first_without_ft_perception_reconfigures(start_cluster, artifacts, run_dir) -> None:
    cluster, _ = _hardware_cluster(start_cluster, run_dir)
    answer = _hw_fault(artifacts, "--controller", cluster.controller_address, "hw-fault", "node-127.0.0.3",
                       "Ascend910-0", "--level", "L6")
    assert "waiting up to 5s" in answer
    rt = cluster.wait_until(
        lambda rt: rt["phase"] == "NORMAL" and any(t["strategy"] == "instance_reconfiguration" and t["outcome"] == "succeeded"
                                                   for t in cluster.timeline()), 120.0, "reconfiguration")
    data = artifacts.collect(cluster)
    assert [t["strategy"] for t in data["controller_timeline"]] == ["instance_reconfiguration"]
    reconfigure = decision(data["controller_timeline"][0])
    assert reconfigure["fallback_cause"] == "HARDWARE_NOT_CORRELATED" and reconfigure["hardware_ranks"] == []
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3]


def test_hardware_fault_on_a_scaled_down_rank_is_handled(start_cluster, artifacts, run_dir) -> None:
    cluster, _ = _hardware_cluster(start_cluster, run_dir)
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_serving(60.0, alive=[0, 2, 3])
    answer = _hw_fault(artifacts, "--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2",
                       "Ascend910-1", "--level", "L5")
    assert "already committed dead, handled" in answer
    time.sleep(6.0)  # past the correlation window: still nothing happens
    data = artifacts.collect(cluster)
    assert [t["strategy"] for t in data["controller_timeline"]] == ["dp_scale_down"]
    assert data["runtime"]["phase"] == "SCALED_DOWN_RUNNING" and data["runtime"]["alive_dp_ranks"] == [0, 2, 3]


def test_unmappable_hardware_fault_takes_the_original_strategy(start_cluster, artifacts, run_dir) -> None:
    cluster, _ = _hardware_cluster(start_cluster, run_dir)
    answer = _hw_fault(artifacts, "--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2",
                       "davinci-x", "--level", "L6")
    assert "UNKNOWN_CARD_FORMAT" in answer
    cluster.wait_until(
        lambda rt: any(t["strategy"] == "instance_reconfiguration" for t in cluster.timeline()), 30.0, "reconfiguration")
    # No correlation wait: the original strategy was chosen for the unmappable fault itself, not for
    # a correlation window that ran out.
    first = cluster.timeline()[0]
    assert decision(first)["fallback_cause"] == "HARDWARE_UNMAPPABLE"
    cluster.wait_until(lambda rt: rt["phase"] == "NORMAL" and rt["serving_published"], 120.0, "reconfigured")
    data = artifacts.collect(cluster)
    assert not [e for t in data["controller_timeline"] for e in t["events"] if e["name"] == "apply"]
