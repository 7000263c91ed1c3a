"""RFC §8 "Controller 中断": the controller is SIGKILLed while the round is in SCALING_DOWN and
restarted on the same etcd. The interrupted round becomes RECONFIGURING and takes the fallback; the
apply is never replayed. The SCALING_DOWN row and the WAITING_ENGINE_FAULT row (the RFC-era
dialect's held recovery) run on the reference engines, the others on the light engines (what each
engine was sent: the light group's journal of received applies)."""

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


def _scale_down_applies(cluster, ranks=(0, 1, 2, 3)) -> dict[int, list[str]]:
    """What the engines themselves were sent (their journals), by rank: scale_down request ids."""
    return {r: [a["request_id"] for a in cluster.engine_applies(r) if a["instruction"] == "scale_down"]
            for r in ranks}


def _restart_into_reconfiguration(cluster, artifacts) -> dict:
    cluster.kill_controller()
    cluster.restart_controller()
    rt = cluster.wait_until(
        lambda rt: rt["phase"] == "NORMAL" and rt["serving_published"], 150.0, "reconfiguration after restart")
    data = artifacts.collect(cluster)
    assert [t["strategy"] for t in data["controller_timeline"]] == ["instance_reconfiguration"]
    assert rt["dead_committed"] == [] and rt["alive_dp_ranks"] == [0, 1, 2, 3]
    return rt


def test_controller_killed_in_waiting_engine_fault_never_applies(start_cluster, artifacts) -> None:
    """Restart in WAITING_ENGINE_FAULT. Rank 3 is held (unhealthy, recovering) by a stalled
    recovery of its own (RFC-era dialect), so the round waits for it; no engine is ever sent a
    scale_down, before or after the restart."""
    cluster = start_cluster(
        start_etcd=True, engine_args=["--ft-dialect", "rfc", "--diagnosing-sec", "0"],
        controller_overrides={"fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 90.0},
    )
    artifacts.injection(cluster, 3, "stall_next_apply")
    artifacts.injection(cluster, 3, "unhealthy", reason="held in recovery")
    assert cluster.engine_client(3).apply("retry", "held-recovery").status == 202
    for rank in (0, 2):
        artifacts.injection(cluster, rank, "unhealthy", reason="peer 1 gone")
    artifacts.injection(cluster, 1, "executor_death")
    cluster.wait_until(lambda rt: rt["phase"] == "WAITING_ENGINE_FAULT", 60.0, "WAITING_ENGINE_FAULT")
    _restart_into_reconfiguration(cluster, artifacts)
    assert _scale_down_applies(cluster) == {0: [], 1: [], 2: [], 3: []}


def test_controller_killed_between_nodemanager_and_controller_commit_never_replays(
        start_cluster, artifacts) -> None:
    """RFC §8 "Controller 中断": restart in POST_SCALE_CLEANUP, after one NodeManager committed
    and while the other holds its commit. One scale_down per survivor in all; none after the restart."""
    cluster = start_cluster(engines="light", start_etcd=True,
                            pod_overrides={"127.0.0.3": {"fault_injection.enabled": True, "fault_injection.finalize_delay_sec": 30.0}})
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_until(lambda rt: rt["phase"] == "POST_SCALE_CLEANUP", 60.0, "POST_SCALE_CLEANUP")
    applies = _scale_down_applies(cluster)
    assert [len(applies[r]) for r in (0, 1, 2, 3)] == [1, 0, 1, 1]
    _restart_into_reconfiguration(cluster, artifacts)
    assert _scale_down_applies(cluster) == applies


def test_controller_killed_in_scaled_down_running_comes_back_unpublished_then_publishes(
        start_cluster, artifacts) -> None:
    """Restart in SCALED_DOWN_RUNNING: restored with its history, unpublished until it has
    published again, never re-adding the removed rank, and nothing re-applied."""
    cluster = start_cluster(engines="light", start_etcd=True)
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_serving(60.0, alive=[0, 2, 3])
    applies = _scale_down_applies(cluster)
    assert [len(applies[r]) for r in (0, 1, 2, 3)] == [1, 0, 1, 1]
    cluster.kill_controller()
    cluster.restart_controller()
    # Serving is not leading: until the killed leader's lease runs out the new process stands by,
    # its view read from the store, so the first view it has is the one to check.
    first = cluster.wait_until(lambda rt: True, 30.0, "the restarted Controller's view of the instance", poll_sec=0.05)
    artifacts.record("runtime_after_restart", first)
    assert first["phase"] == "SCALED_DOWN_RUNNING" and first["dead_committed"] == [1]
    assert not first["serving_published"] and not first["can_serve"]
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    data = artifacts.collect(cluster)
    assert rt["can_serve"] and data["coordinator_endpoints"] == {cluster.spec.instance_id: [0, 2, 3]}
    assert data["controller_timeline"] == []  # no strategy ran after the restart
    assert _scale_down_applies(cluster) == applies
