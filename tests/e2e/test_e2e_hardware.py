"""RFC §8 hardware rows over real processes. Faults arrive as mounted MindCluster ConfigMap files in
the controller's watched directory (the ResourceMonitor's directory source) or through the
ReportHardwareFault RPC (motorctl hw-fault); cards are Ascend910-<index on the pod>, nodes
node-<pod ip>. The hardware-first scale-down runs on the reference engines, the others on the light
ones."""

from __future__ import annotations

import time

import pytest
from .watch import counter, decision, wait_hardware_taken

from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(240)

WINDOW_SEC = 1.0


@pytest.fixture
def hardware_cluster(start_cluster, hardware_overrides):
    def start(engines: str = "light", **overrides):
        return start_cluster(engines=engines, controller_overrides={**hardware_overrides, **overrides})
    return start


def test_hardware_first_then_ft_perception_scales_down(hardware_cluster, artifacts, hw_fault, configmap_dir) -> None:
    cluster = hardware_cluster(engines="reference")
    # Rank 1 is the second card of pod 127.0.0.2.
    hw_fault("hw-fault", "node-127.0.0.2", "Ascend910-1", "--level", "L5", "--configmap-dir", str(configmap_dir))
    wait_hardware_taken(cluster, "L5")  # the directory source picked it up and opened the 5 s window
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


def test_hardware_first_without_ft_perception_reconfigures(hardware_cluster, artifacts, hw_fault) -> None:
    cluster = hardware_cluster()
    answer = hw_fault("--controller", cluster.controller_address, "hw-fault", "node-127.0.0.3",
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


def test_hardware_fault_on_a_scaled_down_rank_is_handled(hardware_cluster, artifacts, hw_fault) -> None:
    # A short correlation window: the wait below only has to outlast it.
    cluster = hardware_cluster(**{"fault_tolerance_config.hardware_ft_correlation_window_sec": WINDOW_SEC})
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_serving(60.0, alive=[0, 2, 3])
    answer = hw_fault("--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2",
                      "Ascend910-1", "--level", "L5")
    assert "already committed dead, handled" in answer  # taken, and no correlation window opened for it
    assert counter(cluster, "motor_hardware_faults_total", level="L5", mapped="true") == 1
    # Kept sleep: the check is that nothing happens later, and nothing signals "a window would have
    # ended now" (no window was opened). One window and a margin, so a window that did open would
    # have run out into a reconfiguration.
    time.sleep(WINDOW_SEC + 0.5)
    data = artifacts.collect(cluster)
    assert [t["strategy"] for t in data["controller_timeline"]] == ["dp_scale_down"]
    assert data["runtime"]["phase"] == "SCALED_DOWN_RUNNING" and data["runtime"]["alive_dp_ranks"] == [0, 2, 3]


def test_unmappable_hardware_fault_takes_the_original_strategy(hardware_cluster, artifacts, hw_fault) -> None:
    cluster = hardware_cluster()
    answer = hw_fault("--controller", cluster.controller_address, "hw-fault", "node-127.0.0.2",
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
