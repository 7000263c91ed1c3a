"""MindCluster as it really publishes faults, over real processes (issue 21).

Faults arrive as kubelet-mounted ConfigMaps in the directory the Controller watches
(`hardware_monitor.configmap_dir`), written in MindCluster's formats by motorctl: the device plugin's
A5 device-info (`huawei.com/npu`, cards `npu-<phyId>`), NodeD's `mindx-dl-nodeinfo-<node>`, or over
the ReportHardwareFault RPC with the switch's level names. Each row waits for the Controller to have
taken the fault (its `motor_hardware_faults_total` counter), then gives the software evidence.
"""

from __future__ import annotations

import io
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from motor.cli.motorctl import run as motorctl
from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(240)

A5_CARDS = [f"npu-{r}" for r in range(4)]


def _decision(txn: dict) -> dict:
    return next(e for e in txn["events"] if e["event_kind"] == "DECISION")


def _controller_overrides(cm_dir) -> dict:
    return {
        "hardware_monitor.configmap_dir": str(cm_dir),
        "hardware_monitor.poll_interval_sec": 0.3,
        "hardware_monitor.kubernetes": "off",
        "fault_tolerance_config.software_status_collection_timeout_sec": 30.0,
    }


def _hw_fault(artifacts, *argv: str) -> str:
    out = io.StringIO()
    assert motorctl(list(argv), out=out) == 0
    answer = out.getvalue().strip()
    artifacts.data["injections"].append({"at_unix_sec": time.time(), "command": "motorctl " + " ".join(argv),
                                         "answer": answer})
    return answer


def _hardware_faults_taken(cluster, level: str) -> float:
    """motor_hardware_faults_total{level, mapped="true"}: faults the Controller mapped to ranks."""
    for family in text_string_to_metric_families(cluster.scrape("controller")):
        if family.name == "motor_hardware_faults":
            return sum(s.value for s in family.samples
                       if s.name.endswith("_total") and s.labels == {"level": level, "mapped": "true"})
    return 0.0


def _wait_taken(cluster, level: str, timeout_sec: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_sec
    while _hardware_faults_taken(cluster, level) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Controller did not take a mapped {level} hardware fault within {timeout_sec:g}s")
        time.sleep(0.1)


def test_a5_card_npu_1_maps_to_rank_1_and_scales_down_with_the_software_evidence(
        start_cluster, artifacts, run_dir) -> None:
    cm_dir = run_dir / "configmaps"
    cm_dir.mkdir(exist_ok=True)
    # The pod's annotations as a downwardAPI volume holds them: the NodeManager checks at registration
    # that its device ids are the cards the device plugin mounted (huawei.com/AscendReal).
    annotations = run_dir / "podinfo-annotations"
    annotations.write_text(f'huawei.com/AscendReal="{",".join(A5_CARDS)}"\nhuawei.com/npu="{",".join(A5_CARDS)}"')
    cluster = start_cluster(
        dp_size=4, ranks_per_pod=4, controller_overrides=_controller_overrides(cm_dir),
        nodemanager_overrides={
            "engines": [{"dp_rank": r, "device_infos": [{"device_id": A5_CARDS[r]}]} for r in range(4)],
            "pod_annotations_file": str(annotations),
        })
    answer = _hw_fault(artifacts, "hw-fault", "node-127.0.0.2", "npu-1", "--level", "SeparateNPU",
                       "--configmap-dir", str(cm_dir))
    assert "mindx-dl-deviceinfo-node-127.0.0.2" in answer
    _wait_taken(cluster, "L6")
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1]
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    chosen = _decision(txn)
    assert chosen["name"] == "scale_down" and chosen["ranks"] == [1] and chosen["hardware_ranks"] == [1]
    assert all(a["ranks"] == [1] for a in data["applies"])
    # The issue's own command: an A5 card and the switch level name, over the RPC.
    answer = _hw_fault(artifacts, "--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2", "npu-1",
                       "--level", "Separate")
    assert "level=L6" in answer and "ranks [1] already committed dead, handled" in answer
    assert "UNKNOWN_CARD_FORMAT" not in answer


def test_noded_separate_fault_opens_the_correlation_for_every_rank_on_the_node(start_cluster, artifacts, run_dir) -> None:
    cm_dir = run_dir / "configmaps"
    cm_dir.mkdir(exist_ok=True)
    cluster = start_cluster(controller_overrides=_controller_overrides(cm_dir))
    # NodeD's nodeinfo ConfigMap: a CPU SeparateFault on node-127.0.0.2 (ranks 0 and 1).
    answer = _hw_fault(artifacts, "hw-fault", "node-127.0.0.2", "--via", "nodeinfo", "--level", "SeparateFault",
                       "--code", "0C000025", "--configmap-dir", str(cm_dir))
    assert "mindx-dl-nodeinfo-node-127.0.0.2" in answer
    _wait_taken(cluster, "L6")
    artifacts.injection(cluster, 0, "executor_death")
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[2, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [0, 1]
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    chosen = _decision(txn)
    # The node fault mapped to every rank of the instance on that node, and both had to be DEAD.
    assert chosen["hardware_ranks"] == [0, 1] and chosen["ranks"] == [0, 1]


def test_switch_separate_is_l6_for_every_rank_on_the_node(start_cluster, artifacts, run_dir) -> None:
    cm_dir = run_dir / "configmaps"
    cm_dir.mkdir(exist_ok=True)
    cluster = start_cluster(controller_overrides=_controller_overrides(cm_dir))
    answer = _hw_fault(artifacts, "--controller", cluster.controller_address, "hw-fault", "node-127.0.0.3",
                       "--via", "switch", "--level", "Separate", "--code", "00F103B0")
    assert "level=L6" in answer and "type=SwitchFault" in answer
    assert "ranks [2, 3], waiting up to 5s" in answer
    artifacts.injection(cluster, 2, "executor_death")
    artifacts.injection(cluster, 3, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 1])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [2, 3]
    chosen = _decision(data["controller_timeline"][-1])
    assert chosen["name"] == "scale_down" and chosen["hardware_ranks"] == [2, 3]
