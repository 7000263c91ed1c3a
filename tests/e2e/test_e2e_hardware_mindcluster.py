"""MindCluster as it really publishes faults, over real processes.

Faults arrive as kubelet-mounted ConfigMaps in the directory the Controller watches
(`hardware_monitor.configmap_dir`), written in MindCluster's formats by motorctl: the device plugin's
A5 device-info (`huawei.com/npu`, cards `npu-<phyId>`), NodeD's `mindx-dl-nodeinfo-<node>`, or over
the ReportHardwareFault RPC with the switch's level names. Each row waits for the Controller to have
taken the fault (its `motor_hardware_faults_total` counter), then gives the software evidence. The
engines are the light ones: what is checked is the mapping of cards and nodes to ranks.
"""

from __future__ import annotations

import pytest
from .watch import decision, wait_hardware_taken

from motor.launch.engines import LIGHT_ENGINE_PORT_BASE
from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(240)

A5_CARDS = [f"npu-{r}" for r in range(4)]


def _scaled_down(cluster, artifacts, dead: list[int], alive: list[int]) -> dict:
    """Software evidence for `dead` (executor deaths under traffic) → a successful scale-down round
    serving `alive`; returns its DECISION event."""
    for rank in dead:
        artifacts.injection(cluster, rank, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=alive)
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == dead
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    assert all(a["ranks"] == dead for a in data["applies"])
    return decision(txn)


def test_a5_card_npu_1_maps_to_rank_1_and_scales_down_with_the_software_evidence(
        start_cluster, artifacts, run_dir, hw_fault, configmap_dir, hardware_overrides) -> None:
    # The pod's annotations as a downwardAPI volume holds them: the NodeManager checks at registration
    # that its device ids are the cards the device plugin mounted (huawei.com/AscendReal).
    annotations = run_dir / "podinfo-annotations"
    annotations.write_text(f'huawei.com/AscendReal="{",".join(A5_CARDS)}"\nhuawei.com/npu="{",".join(A5_CARDS)}"')
    cluster = start_cluster(
        engines="light", dp_size=4, ranks_per_pod=4, controller_overrides=hardware_overrides,
        nodemanager_overrides={
            # The light group's fixed ports (every rank on the one pod), the A5 cards as device ids.
            "engines": [{"dp_rank": r, "port": LIGHT_ENGINE_PORT_BASE + r, "device_infos": [{"device_id": A5_CARDS[r]}]}
                        for r in range(4)],
            "pod_annotations_file": str(annotations),
        })
    answer = hw_fault("hw-fault", "node-127.0.0.2", "npu-1", "--level", "SeparateNPU",
                      "--configmap-dir", str(configmap_dir))
    assert "mindx-dl-deviceinfo-node-127.0.0.2" in answer
    wait_hardware_taken(cluster, "L6")
    chosen = _scaled_down(cluster, artifacts, dead=[1], alive=[0, 2, 3])
    assert chosen["name"] == "scale_down" and chosen["ranks"] == [1] and chosen["hardware_ranks"] == [1]
    # The issue's own command: an A5 card and the switch level name, over the RPC.
    answer = hw_fault("--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2", "npu-1",
                       "--level", "Separate")
    assert "level=L6" in answer and "ranks [1] already committed dead, handled" in answer
    assert "UNKNOWN_CARD_FORMAT" not in answer


def test_noded_separate_fault_opens_the_correlation_for_every_rank_on_the_node(
        start_cluster, artifacts, hw_fault, configmap_dir, hardware_overrides) -> None:
    cluster = start_cluster(engines="light", controller_overrides=hardware_overrides)
    # NodeD's nodeinfo ConfigMap: a CPU SeparateFault on node-127.0.0.2 (ranks 0 and 1).
    answer = hw_fault("hw-fault", "node-127.0.0.2", "--via", "nodeinfo", "--level", "SeparateFault",
                      "--code", "0C000025", "--configmap-dir", str(configmap_dir))
    assert "mindx-dl-nodeinfo-node-127.0.0.2" in answer
    wait_hardware_taken(cluster, "L6")
    chosen = _scaled_down(cluster, artifacts, dead=[0, 1], alive=[2, 3])
    # The node fault mapped to every rank of the instance on that node, and both had to be DEAD.
    assert chosen["hardware_ranks"] == [0, 1] and chosen["ranks"] == [0, 1]


def test_switch_separate_is_l6_for_every_rank_on_the_node(start_cluster, artifacts, hw_fault, hardware_overrides) -> None:
    cluster = start_cluster(engines="light", controller_overrides=hardware_overrides)
    answer = hw_fault("--controller", cluster.controller_address, "hw-fault", "node-127.0.0.3",
                      "--via", "switch", "--level", "Separate", "--code", "00F103B0")
    assert "level=L6" in answer and "type=SwitchFault" in answer
    assert "ranks [2, 3], waiting up to 5s" in answer
    chosen = _scaled_down(cluster, artifacts, dead=[2, 3], alive=[0, 1])
    assert chosen["name"] == "scale_down" and chosen["hardware_ranks"] == [2, 3]
