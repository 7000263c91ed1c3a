"""Everything around the leader fails in turn, over real processes.

- A NodeManager is SIGKILLed (with its engines) while it holds a round's guard: the round fails
  cleanly (the other guard aborted), and the instance recovers by reconfiguration once the pod is
  back.
- etcd is restarted in SCALED_DOWN_RUNNING and again in the middle of a round: no state is lost,
  a replica keeps or regains leadership, nothing is replayed.
- The Coordinator is SIGKILLed in the middle of a round: the round still commits; the restarted
  Coordinator asks the leader for the survivors' view (a SET) and routes only to them.
- The leader is frozen (SIGSTOP: cut off from etcd while time goes on) while the standby takes over
  and runs a round; resumed, the old leader does not act (no publication, no write, no call): it
  finds its term lost and stands by.

Each row counts what the engines were sent and what etcd holds.
"""

from __future__ import annotations

import pytest

from motor.launch.load import trigger_traffic
from motor.testing.waits import wait_for

from .chaos_checks import (
    POD_0,
    POD_1,
    assert_at_most_one_apply_per_survivor_per_round,
    assert_serving,
    assert_store_matches,
    guards_held,
    scale_down_applies,
)

# Each look reads the cluster's status pages: look every 0.2 s.
LOOK_SEC = 0.2

pytestmark = pytest.mark.timeout(600)

ALL = [0, 1, 2, 3]


def _normal(rt) -> bool:
    return rt["phase"] == "NORMAL" and rt["serving_published"] and rt["alive_dp_ranks"] == ALL


def test_nodemanager_killed_while_holding_a_guard(ha_cluster, artifacts) -> None:
    cluster = ha_cluster(
        # POD_1 holds every guard's answer 3 s: it holds the round's guard while the round waits.
        pod_overrides={POD_1: {"fault_injection.enabled": True, "fault_injection.guard_delay_sec": 3.0}},
        controller_overrides={"fault_tolerance_config.strategy_center_check_interval": 2.0},
    )
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_until(lambda rt: rt["phase"] == "DECIDING" and rt["request_id"]
                            and guards_held(cluster).get(POD_1) == rt["request_id"], 60.0, "guard held on POD_1")
    round_id = rt["request_id"]
    killed = cluster.kill_nodemanager(POD_1)
    artifacts.step(f"killed the NodeManager of {POD_1} holding the guard", request_id=round_id, engines=killed)
    rt = cluster.wait_until(lambda rt: rt["phase"] == "RECONFIGURING", 60.0, "the round failed")
    artifacts.step("round failed", runtime=rt)
    assert round_id in (rt["last_error"] or "") or rt["request_id"] == round_id
    # The round failed before any apply; its guard on the surviving pod was aborted.
    assert scale_down_applies(cluster) == {}
    assert guards_held(cluster, [POD_0]) == {}
    cluster.restart_nodemanager(POD_1)
    rt = cluster.wait_until(_normal, 180.0, "recovered by reconfiguration")
    assert rt["dead_committed"] == []
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)
    artifacts.step("recovered", runtime=rt, etcd=cluster.etcd_view())


def test_etcd_restarted_in_scaled_down_running_during_a_round_and_for_longer_than_the_lease(ha_cluster, artifacts) -> None:
    cluster = ha_cluster()
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    before = cluster.etcd_view()
    applies = assert_at_most_one_apply_per_survivor_per_round(cluster)
    cluster.restart_etcd()
    leader = cluster.leader()
    artifacts.step("etcd restarted in SCALED_DOWN_RUNNING", before=before, after=cluster.etcd_view(),
                   leader=leader.name)
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    assert rt["dead_committed"] == [1] and rt["phase"] == "SCALED_DOWN_RUNNING"
    assert cluster.etcd_view()["record"] == before["record"]  # nothing lost, nothing rewritten
    assert assert_at_most_one_apply_per_survivor_per_round(cluster) == applies
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)

    # A round held in SCALING_DOWN by slow rebuilds while etcd restarts: it commits (the leader kept
    # its term) or falls back (it lost it: the new term restores SCALING_DOWN as interrupted).
    for rank in (0, 3):
        cluster.inject(rank, "slow_rebuild", delay_sec=4.0)
    cluster.inject(2, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_until(lambda rt: rt["phase"] == "SCALING_DOWN", 60.0, "SCALING_DOWN")
    cluster.restart_etcd()
    artifacts.step("etcd restarted during the round", runtime=rt, etcd=cluster.etcd_view())
    rt = cluster.wait_until(lambda rt: rt["can_serve"] and rt["phase"] in ("SCALED_DOWN_RUNNING", "NORMAL"),
                            180.0, "serving after the round")
    rounds = assert_at_most_one_apply_per_survivor_per_round(cluster)
    if rt["phase"] == "SCALED_DOWN_RUNNING":
        assert rt["dead_committed"] == [1, 2] and rt["alive_dp_ranks"] == [0, 3]
    else:
        assert rt["dead_committed"] == [] and rt["alive_dp_ranks"] == ALL
    assert len(rounds) == 2
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)
    artifacts.step("after the round", runtime=rt, applies=rounds, etcd=cluster.etcd_view(),
                   leader=cluster.leader().name)

    # etcd gone for longer than the lease: the leader cannot renew, stands down, and a replica
    # regains leadership once etcd is back, restoring exactly what was committed.
    before, leader = cluster.etcd_view(), cluster.leader()
    cluster.stop_etcd()
    wait_for(lambda: not (cluster.controller_status(leader) or {}).get("leadership", {}).get("is_leader", True),
             60.0, f"{leader.name} standing down without etcd", interval_sec=LOOK_SEC)
    artifacts.step("etcd down: the leader stood down", leader=leader.name,
                   leadership=cluster.controller_status(leader)["leadership"])
    cluster.start_etcd_again()
    regained = cluster.leader()
    restored = cluster.wait_until(lambda r: r["can_serve"], 60.0, "serving again after etcd came back")
    artifacts.step("etcd back", leader=regained.name, runtime=restored, etcd=cluster.etcd_view())
    assert (restored["phase"], restored["dead_committed"]) == (rt["phase"], rt["dead_committed"])
    assert cluster.etcd_view()["record"]["dead_committed"] == before["record"]["dead_committed"]
    assert cluster.etcd_view()["leader"]["term"] > before["leader"]["term"]
    assert assert_at_most_one_apply_per_survivor_per_round(cluster) == rounds  # nothing replayed
    assert_store_matches(cluster, restored)
    assert_serving(cluster, restored)


def test_coordinator_killed_during_a_round(ha_cluster, artifacts) -> None:
    cluster = ha_cluster()
    # Slow rebuilds keep the round in SCALING_DOWN while the Coordinator is gone.
    for rank in (0, 2, 3):
        cluster.inject(rank, "slow_rebuild", delay_sec=3.0)
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_until(lambda rt: rt["phase"] == "SCALING_DOWN", 60.0, "SCALING_DOWN")
    cluster.kill_coordinator()
    artifacts.step("killed the Coordinator in SCALING_DOWN")
    rt = cluster.wait_until(lambda rt: rt["phase"] == "SCALED_DOWN_RUNNING", 60.0, "committed without a Coordinator")
    assert rt["dead_committed"] == [1] and not rt["can_serve"]
    assert_store_matches(cluster, rt)
    cluster.restart_coordinator()
    # The restarted Coordinator asked the leader for the survivors' view before routing anything.
    assert cluster.published() == {cluster.spec.instance_id: [0, 2, 3]}
    rt = cluster.wait_serving(60.0, alive=[0, 2, 3])
    assert assert_at_most_one_apply_per_survivor_per_round(cluster) and len(scale_down_applies(cluster)) == 1
    assert_serving(cluster, rt)
    log = (cluster.run_dir / "coordinator.log").read_text()
    assert "serving view synced from the Controller leader" in log
    artifacts.step("Coordinator back", runtime=rt, published=cluster.published())


def test_frozen_leader_does_not_act_after_it_resumes(ha_cluster, artifacts) -> None:
    cluster = ha_cluster()
    cluster.inject(1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_serving(60.0, alive=[0, 2, 3])
    old = cluster.leader()
    old_term = cluster.controller_status(old)["leadership"]["term"]
    cluster.freeze_controller(old)
    new = cluster.leader(exclude=old)
    artifacts.step(f"froze {old.name}; {new.name} took over", old_term=old_term)
    # The new leader runs a round while the old one is frozen with its stale view ({0, 2, 3}).
    cluster.inject(2, "executor_death")
    trigger_traffic(cluster)
    rt = cluster.wait_serving(60.0, alive=[0, 3])
    stored, published, applies = cluster.etcd_view(), cluster.published(), scale_down_applies(cluster)
    assert stored["leader"]["term"] > old_term and stored["record"]["dead_committed"] == [1, 2]
    cluster.thaw_controller(old)
    # Resumed: the old leader finds its term lost (its lease deadline passed while frozen) and stands by.
    def stood_down():
        doc = cluster.controller_status(old)
        leadership = (doc or {}).get("leadership") or {}
        log = (cluster.run_dir / f"{old.name}.log").read_text()
        return leadership if not leadership.get("is_leader") and leadership.get("leader_id") == new.name \
            and "stopped acting" in log else None

    leadership = wait_for(stood_down, 60.0, f"{old.name} standing down", interval_sec=LOOK_SEC)
    log = (cluster.run_dir / f"{old.name}.log").read_text()
    artifacts.step(f"{old.name} resumed and stood down", leadership=leadership)
    # It did not act: nothing it could have sent or written is there.
    assert cluster.etcd_view() == stored
    assert cluster.published() == published == {cluster.spec.instance_id: [0, 3]}
    assert scale_down_applies(cluster) == applies
    resumed = log[log.index("leadership of term"):] if "leadership of term" in log else log
    for acted in ("published endpoints", "drained endpoints", " phase=", "persisted generation"):
        assert acted not in resumed, f"{old.name} acted after resuming: {acted!r}"
    rt = cluster.wait_serving(30.0, alive=[0, 3])
    assert_store_matches(cluster, rt)
    assert_serving(cluster, rt)
