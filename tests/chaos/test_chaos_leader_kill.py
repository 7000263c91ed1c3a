"""The leader Controller is SIGKILLed in each phase of a round; the standby takes over
(RFC §5 restart rules) and the instance ends serving with a consistent dead_committed and at most
one apply per survivor per round.

- DECIDING, WAITING_ENGINE_FAULT, SCALING_DOWN (after every survivor accepted its apply) and
  POST_SCALE_CLEANUP (one NodeManager committed, the other still holding its commit): the new leader
  finds the interrupted round in etcd, turns it into RECONFIGURING and takes the fallback; no engine
  is sent a scale_down after the kill, and the dead round's guards are released by the relaunch.
- SCALED_DOWN_RUNNING (with mTLS everywhere, TLS to etcd): the new leader restores the committed
  history, publishes the survivors (never re-adding the removed rank) without running any strategy,
  and runs the next round itself.

Every row counts what the engines were sent (their own apply journals) and what etcd holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from motor.launch.load import trigger_traffic

from .chaos_checks import (
    POD_0,
    POD_1,
    assert_at_most_one_apply_per_survivor_per_round,
    assert_serving,
    assert_store_matches,
    guards_held,
    new_transactions,
    retired_ranks,
    scale_down_applies,
)

pytestmark = pytest.mark.timeout(600)

ALL = [0, 1, 2, 3]


def _arm_deciding(cluster) -> None:
    # POD_1 holds every guard's answer 3 s (its pod override): the round sits in DECIDING.
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)


def _arm_waiting(cluster) -> None:
    # RFC-era dialect: rank 3 stays (unhealthy, recovering) in a stalled recovery of its own, so the
    # round waits for it (WAITING_ENGINE_FAULT) and never applies.
    cluster.inject(3, "stall_next_apply")
    cluster.inject(3, "unhealthy", reason="held in recovery")
    assert cluster.engine_client(3).apply("retry", "held-recovery").status == 202
    for rank in (0, 2):
        cluster.inject(rank, "unhealthy", reason="peer 1 gone")
    cluster.inject(1, "executor_death")


def _arm_scaling_down(cluster) -> None:
    # The survivors accept the apply and stay recovering: the round sits in SCALING_DOWN.
    for rank in (0, 2, 3):
        cluster.inject(rank, "stall_next_apply")
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)


def _arm_post_scale_cleanup(cluster) -> None:
    # POD_1 holds finalize(commit) 4 s: POD_0 has committed, the Controller has not.
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)


def _applied_by_every_survivor(cluster, rt: dict[str, Any]) -> bool:
    return all(rt["request_id"] in {a["request_id"] for a in cluster.engine_applies(r)} for r in (0, 2, 3))


ROWS: list[tuple[str, Callable[[Any], None], Callable[[Any, dict[str, Any]], bool]]] = [
    ("DECIDING", _arm_deciding, lambda cluster, rt: bool(rt["request_id"])),
    ("WAITING_ENGINE_FAULT", _arm_waiting, lambda cluster, rt: True),
    ("SCALING_DOWN", _arm_scaling_down, _applied_by_every_survivor),
    ("POST_SCALE_CLEANUP", _arm_post_scale_cleanup, lambda cluster, rt: retired_ranks(cluster, POD_0) == [1]),
]


def test_leader_killed_mid_round_takes_the_fallback_and_never_applies_again(ha_cluster, artifacts) -> None:
    cluster = ha_cluster(
        engine_args=["--ft-dialect", "rfc", "--diagnosing-sec", "0"],
        pod_overrides={POD_1: {"fault_injection.enabled": True, "fault_injection.guard_delay_sec": 3.0,
                                     "fault_injection.finalize_delay_sec": 4.0}},
        controller_overrides={"fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 60.0},
    )
    for phase, arm, ready in ROWS:
        leader = cluster.leader()
        arm(cluster)
        rt = cluster.wait_until(lambda rt, phase=phase, ready=ready: rt["phase"] == phase and ready(cluster, rt),
                                90.0, f"{phase} under {leader.name}")
        applies = scale_down_applies(cluster)
        stored = cluster.etcd_view()
        killed_at = time.time()
        cluster.kill_controller(leader)
        new = cluster.leader(exclude=leader)
        artifacts.step(f"killed {leader.name} in {phase}", runtime=rt, etcd=stored, applies=applies,
                       new_leader=new.name)
        # WAITING_ENGINE_FAULT is entered without a write: the round's persisted phase stays DECIDING.
        assert stored["record"]["phase"] == ("DECIDING" if phase == "WAITING_ENGINE_FAULT" else phase)
        if phase == "POST_SCALE_CLEANUP":
            assert stored["record"]["dead_committed"] == []  # the Controller had not committed
        rt = cluster.wait_until(
            lambda rt: rt["phase"] == "NORMAL" and rt["serving_published"] and rt["alive_dp_ranks"] == ALL,
            180.0, f"fallback after the kill in {phase}")
        # The interrupted round is never replayed: no engine was sent anything after the kill.
        assert scale_down_applies(cluster) == applies
        assert_at_most_one_apply_per_survivor_per_round(cluster)
        assert [t["strategy"] for t in new_transactions(cluster, killed_at)] == ["instance_reconfiguration"]
        assert rt["dead_committed"] == []
        assert_store_matches(cluster, rt)
        # The dead round's guards went with the old DP group (every engine relaunched).
        assert guards_held(cluster) == {}
        assert_serving(cluster, rt)
        artifacts.step(f"recovered from the kill in {phase}", runtime=rt, etcd=cluster.etcd_view(),
                       applies=scale_down_applies(cluster))
        cluster.restart_controller(svc=leader)  # back as a standby for the next row


def test_leader_killed_in_scaled_down_running_publishes_the_survivors_and_leads_the_next_round(
        ha_cluster, artifacts) -> None:
    # With mTLS and roles on every contract and TLS (client certificates) to etcd: the election,
    # the fenced writes and the NodeManagers following the leader all run over it.
    cluster = ha_cluster(tls=True)
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_serving(60.0, alive=[0, 2, 3])
    applies = assert_at_most_one_apply_per_survivor_per_round(cluster)
    assert [sorted(ranks) for ranks in applies.values()] == [[0, 2, 3]]
    leader = cluster.leader()
    killed_at = time.time()
    cluster.kill_controller(leader)
    new = cluster.leader(exclude=leader)
    first = cluster.runtime()
    artifacts.step(f"killed {leader.name} in SCALED_DOWN_RUNNING", new_leader=new.name, first_runtime=first)
    assert first["phase"] == "SCALED_DOWN_RUNNING" and first["dead_committed"] == [1]
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    assert new_transactions(cluster, killed_at) == []  # restored and published, no strategy ran
    assert assert_at_most_one_apply_per_survivor_per_round(cluster) == applies  # nothing re-applied
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)
    # The new leader leads the next round (the NodeManagers follow it and report to it).
    cluster.inject(2, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 3])
    assert rt["dead_committed"] == [1, 2]
    rounds = assert_at_most_one_apply_per_survivor_per_round(cluster)
    assert sorted(sorted(r) for r in rounds.values()) == [[0, 2, 3], [0, 3]]
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)
    artifacts.step("second round under the new leader", runtime=rt, applies=rounds, etcd=cluster.etcd_view())
