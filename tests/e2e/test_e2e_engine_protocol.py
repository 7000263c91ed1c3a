"""The engine FT protocol as vLLM builds it (PR #46370; the reference engine's default dialect), over
real processes: the transient `diagnosing` state, a failed recovery vote, the lowest-alive-rank
master, faults whose fault_info is the same every time, and the survivors' check-in window. Every row
runs on the light engines (the same protocol, one fake group process); the reference engine's own
group rebuilds are the rows of test_e2e_scale_down.py."""

from __future__ import annotations

import pytest
from .watch import LastErrors, wait_reconfigured

from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(300)

ROUND_SEC = 60.0
FAST = {
    "fault_tolerance_config.software_status_collection_timeout_sec": 8.0,
    "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 20.0,
}


def _events(txn: dict, kind: str, name: str | None = None) -> list[dict]:
    return [e for e in txn["events"] if e["event_kind"] == kind and (name is None or e["name"] == name)]


def _strategies(timeline: list[dict]) -> list[tuple[str, str]]:
    return [(t["strategy"], "succeeded" if t["outcome"] == "succeeded" else "failed") for t in timeline]


def _kill(cluster, artifacts, rank: int) -> None:
    artifacts.injection(cluster, rank, "executor_death")
    trigger_traffic(cluster)


def test_survivors_are_seen_diagnosing_before_unhealthy_and_the_round_succeeds(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light")
    _kill(cluster, artifacts, 1)
    rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1] and _strategies(data["controller_timeline"]) == [("dp_scale_down", "succeeded")]
    txn = data["controller_timeline"][-1]
    evidence = _events(txn, "EVIDENCE")
    assert not [e for e in evidence if e["evidence_kind"] == "PROTOCOL_ERROR"]
    diagnosed = [e for e in evidence if e["ranks"][0] in (0, 2, 3) and e["diagnosing_observed_at_unix_sec"] > 0]
    artifacts.record("diagnosing_seen", [(e["ranks"], e["diagnosing_observed_at_unix_sec"], e["observed_at_unix_sec"])
                                         for e in diagnosed])
    # The engine's diagnosing phase (1.5 s) outlasts the 1 s poll: survivors were seen in it first.
    assert diagnosed and all(e["diagnosing_observed_at_unix_sec"] < e["observed_at_unix_sec"] for e in diagnosed)
    assert all(e["evidence_kind"] == "UNHEALTHY" for e in diagnosed)


def test_a_failed_vote_turns_every_survivor_dead_and_falls_back(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light", controller_overrides=FAST)
    artifacts.injection(cluster, 2, "fail_vote", reason="injected vote failure")
    watch = LastErrors(cluster, cluster.spec.instance_id)
    try:
        _kill(cluster, artifacts, 1)
        rt = wait_reconfigured(cluster, 150.0)
    finally:
        watch.close()
    data = artifacts.collect(cluster)
    artifacts.record("last_errors_seen", watch.values)
    assert _strategies(data["controller_timeline"]) == [("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    txn = data["controller_timeline"][0]
    applies = _events(txn, "CALL", "apply")
    accepted = sorted(r["endpoint_id"] for a in applies for r in a["apply_results"] if r["http_status"] == 202)
    assert accepted == [0, 2, 3]  # exactly one apply per survivor, never retried
    after_apply = [s for e in _events(txn, "CALL", "status") if e["at_unix_sec"] > applies[0]["at_unix_sec"]
                   for s in e["engine_statuses"]]
    dead = {s["id"] for s in after_apply if s["status"] == "DEAD" and "Recovery failed" in s["fault_info"]}
    assert dead, after_apply  # the survivors' vote failed: they report dead, "full restart required"
    finalizes = _events(txn, "CALL", "finalize")
    assert len(finalizes) == 2 and not any(e["commit"] for e in finalizes)
    assert any("Recovery failed" in value for value in watch.values), watch.values
    assert rt["dead_committed"] == [] and rt["alive_dp_ranks"] == [0, 1, 2, 3]


def test_removing_the_lowest_alive_rank_that_is_not_rank_0_sends_the_new_master_and_store_port(
        start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light")
    _kill(cluster, artifacts, 0)
    cluster.wait_serving(ROUND_SEC, alive=[1, 2, 3])
    _kill(cluster, artifacts, 1)  # now the lowest alive rank, and the TCPStore master
    rt = cluster.wait_serving(ROUND_SEC, alive=[2, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [0, 1]
    assert _strategies(data["controller_timeline"]) == [("dp_scale_down", "succeeded")] * 2
    first, second = data["controller_timeline"]
    assert {a["dp_master_ip"] for a in _events(first, "CALL", "apply")} == {"127.0.0.2"}  # rank 1 on pod .2
    applies = _events(second, "CALL", "apply")
    assert applies and all(a["ranks"] == [0, 1] and a["dp_master_ip"] == "127.0.0.3" for a in applies)
    # Rank 2 on pod .3 is the new master; the Controller chose the store port of its pod.
    assert {a["dp_store_port"] for a in applies} == {cluster.dp_store_port_base + 2}


def test_the_next_fault_right_after_the_publish_scales_down_again_though_fault_info_repeats(
        start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light")
    _kill(cluster, artifacts, 1)
    cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
    _kill(cluster, artifacts, 2)  # at once: its peers may not have been polled healthy in between
    rt = cluster.wait_serving(ROUND_SEC, alive=[0, 3])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1, 2]
    assert _strategies(data["controller_timeline"]) == [("dp_scale_down", "succeeded")] * 2
    second = data["controller_timeline"][1]
    infos = {s["fault_info"] for e in _events(second, "CALL", "status") for s in e["engine_statuses"]
             if s["status"] == "UNHEALTHY"}
    assert infos == {"RuntimeError"}  # vLLM's fault_info: the exception's type name, every time


def test_apply_skew_is_recorded_and_an_apply_past_the_checkin_window_falls_back_cleanly(
        start_cluster, artifacts) -> None:
    cluster = start_cluster(
        engines="light",
        controller_overrides={**FAST, "fault_tolerance_config.dp_scale_down_config.request_timeout_sec": 20.0},
        pod_overrides={"127.0.0.3": {"fault_injection.enabled": True, "fault_injection.apply_delay_sec": 11.0}},
    )
    _kill(cluster, artifacts, 1)
    rt = wait_reconfigured(cluster, 150.0)
    data = artifacts.collect(cluster)
    assert _strategies(data["controller_timeline"]) == [("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    txn = data["controller_timeline"][0]
    skew = _events(txn, "NOTE", "apply_skew")
    assert len(skew) == 1 and skew[0]["skew_sec"] > 10.0 and skew[0]["endpoint_ids"] == [0, 2, 3]
    # The engines' own verdict: the late pod's ranks missed the check-in, the vote failed.
    assert "check-in window" in txn["outcome"] and "Recovery failed" in txn["outcome"], txn["outcome"]
    assert not any(e["commit"] for e in _events(txn, "CALL", "finalize"))
    assert rt["dead_committed"] == []
