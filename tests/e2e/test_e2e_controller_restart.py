"""RFC §8 "Controller 中断": the controller is SIGKILLed while the round is in SCALING_DOWN and
restarted on the same etcd. The interrupted round becomes RECONFIGURING and takes the fallback; the
apply is never replayed."""

from __future__ import annotations

import pytest

from motor.launch.load import LoadGenerator, trigger_traffic

pytestmark = pytest.mark.timeout(300)


def test_controller_killed_in_scaling_down_restarts_into_reconfiguration(start_cluster, artifacts, etcd_endpoint) -> None:
    cluster = start_cluster(
        etcd_endpoints=[etcd_endpoint],
        controller_overrides={"fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 60.0},
    )
    # Survivors accept the apply and then stay recovering, holding the round in SCALING_DOWN.
    for rank in (0, 2, 3):
        artifacts.injection(cluster, rank, "stall_next_apply")
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_until(lambda rt: rt["phase"] == "SCALING_DOWN", 60.0, "SCALING_DOWN")
    first_round = cluster.timeline()[-1]
    applies_before = [e for e in first_round["events"] if e["name"] == "apply"]
    artifacts.record("timeline_before_kill", cluster.timeline())
    cluster.kill_controller()
    cluster.restart_controller()
    rt = cluster.wait_until(
        lambda rt: rt["phase"] == "NORMAL" and rt["serving_published"], 150.0, "reconfiguration after restart")
    data = artifacts.collect(cluster)
    strategies = [t["strategy"] for t in data["controller_timeline"]]
    # The new controller ran no scale-down at all: only the fallback.
    assert strategies == ["instance_reconfiguration"]
    assert not [e for t in data["controller_timeline"] for e in t["events"] if e["name"] == "apply"]
    assert len(applies_before) == 2
    assert rt["dead_committed"] == [] and rt["alive_dp_ranks"] == [0, 1, 2, 3]
    assert rt["generation"] > 0
    load = LoadGenerator(cluster.coordinator_http, concurrency=1, max_tokens=4)
    result = load.send_one("after restart")
    artifacts.data["inference_after_recovery"].append({"status": result.status, "rank": result.rank})
    assert result.ok, result.error
    # The interrupted round's guards died with the old DP group: a new round is not blocked by
    # their lease (85 s+), it runs at once.
    artifacts.injection(cluster, 3, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 1, 2])
    assert rt["dead_committed"] == [3]
    artifacts.collect(cluster)
