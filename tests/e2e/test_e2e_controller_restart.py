"""RFC §8 "Controller 中断": the controller is SIGKILLed while the round is in SCALING_DOWN and
restarted on the same etcd. The interrupted round becomes RECONFIGURING and takes the fallback; the
apply is never replayed."""

from __future__ import annotations

import time

import pytest

from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(300)


def test_controller_killed_in_scaling_down_restarts_into_reconfiguration(start_cluster, artifacts) -> None:
    # A private etcd in the run dir (TLS with client certificates under the mtls transport).
    cluster = start_cluster(
        start_etcd=True,
        controller_overrides={"fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 60.0},
    )
    # Survivors accept the apply and then stay recovering, holding the round in SCALING_DOWN.
    for rank in (0, 2, 3):
        artifacts.injection(cluster, rank, "stall_next_apply")
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_until(lambda rt: rt["phase"] == "SCALING_DOWN", 60.0, "SCALING_DOWN")
    # SCALING_DOWN is entered as the applies go out; each is on the timeline once answered.
    deadline = time.monotonic() + 10.0
    while True:
        first_round = cluster.timeline()[-1]
        applies_before = [e for e in first_round["events"] if e["name"] == "apply"]
        if len(applies_before) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
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
    load = cluster.load_generator(concurrency=1, max_tokens=4)
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
