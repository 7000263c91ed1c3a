"""RFC §8 acceptance rows that end in a successful DP scale-down, over real processes: controller,
coordinator, NodeManagers on 127.0.0.2/.3 and reference engines with real gloo groups (the pod
emptied with scale-up on runs on the light engines: what it checks is the pod's stop).

The ordinary-rank row also checks every service's /metrics through the round (the counters and
histograms move by exactly what it did) and, after the commit, the retired rank in DescribePod and
the FT proxy's refusal of it."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from .service_metrics import delta, get, nm_total, scrape_all, total
from .watch import counter

from gen.motor.v1 import controller_pb2, controller_pb2_grpc, node_manager_pb2, node_manager_pb2_grpc
from motor.common.security import Role
from motor.controller.fault_tolerance.stages import SCALE_DOWN_STAGES
from motor.controller.model.runtime import FtPhase
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(240)

ROUND_SEC = 60.0


def _infer(cluster, artifacts, expect_ranks) -> None:
    load = cluster.load_generator(concurrency=1, max_tokens=4)
    results = [load.send_one(f"after recovery {i}") for i in range(4)]
    artifacts.data["inference_after_recovery"].extend(
        {"status": r.status, "rank": r.rank, "error": r.error} for r in results)
    assert all(r.ok for r in results), [r.error for r in results]
    assert {r.rank for r in results} <= set(expect_ranks)


def _wait_flowing(load, n: int = 8) -> None:
    """Traffic flows: `n` completions went through (so the survivors' collectives see a death)."""
    wait_for(lambda: load.counts()["succeeded"] >= n, 60.0, f"{n} completions under load")


def _wait_served_after(load, since_unix_sec: float, n: int) -> None:
    """`n` requests that started after `since_unix_sec` (e.g. the recovery) have been answered."""
    wait_for(lambda: len([r for r in load.snapshot() if r.started_sec > since_unix_sec]) >= n, 60.0,
             f"{n} requests answered after the recovery")


def _applies(txn) -> list[dict]:
    return [e for e in txn["events"] if e["name"] == "apply"]


def _assert_typed_grpc_timeline(cluster) -> None:
    """GetTimeline carries the round's facts as typed fields: removed ranks, apply targets, 202s and
    the request id each engine answered with."""
    with cluster.grpc_channel(cluster.controller_address) as channel:
        resp = controller_pb2_grpc.ControllerStub(channel).GetTimeline(
            controller_pb2.GetTimelineRequest(instance_id=cluster.spec.instance_id), timeout=5)
    txn = resp.transactions[-1]
    kinds = [e.event_kind for e in txn.events]
    assert kinds[0] == controller_pb2.TIMELINE_EVENT_KIND_EVIDENCE and controller_pb2.TIMELINE_EVENT_KIND_PHASE in kinds
    evidence = [e for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_EVIDENCE]
    assert 1 in {r for e in evidence for r in e.ranks}
    assert all(e.received_at_unix_sec >= e.observed_at_unix_sec > 0 for e in evidence)
    decision = next(e for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_DECISION)
    assert decision.name == "scale_down" and list(decision.ranks) == [1]
    assert sorted(decision.unhealthy_ranks) == [0, 2, 3]
    applies = [e for e in txn.events if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_CALL and e.name == "apply"]
    assert all(list(e.ranks) == [1] and e.dp_master_ip == "127.0.0.2" and e.dp_store_port > 0 for e in applies)
    assert sorted(i for e in applies for i in e.endpoint_ids) == [0, 2, 3]
    results = [r for e in applies for r in e.apply_results]
    assert sorted(r.endpoint_id for r in results if r.http_status == 202) == [0, 2, 3]
    assert {r.engine_request_id for r in results} == {txn.request_id}


def test_ordinary_rank_under_load(start_cluster, artifacts) -> None:
    cluster = start_cluster()
    load = cluster.load_generator(concurrency=4, max_tokens=8, max_duration_sec=120).start()
    try:
        _wait_flowing(load)
        before = scrape_all(cluster)
        artifacts.injection(cluster, 1, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
        _wait_served_after(load, time.time(), n=load.concurrency)  # traffic on the survivors
    finally:
        load.stop()
    # The commit retires rank 1: its NodeManager stops that engine on purpose, in the background.
    wait_for(lambda: delta(scrape_all(cluster), before, nm_total, "motor_nodemanager_engine_exits_total",
                           intentional="true") >= 1, 30.0, "the retired engine stopped")
    after = scrape_all(cluster)
    artifacts.record("metrics_before", {k: len(v) for k, v in before.items()})
    data = artifacts.collect(cluster)
    assert rt["phase"] == "SCALED_DOWN_RUNNING" and rt["dead_committed"] == [1] and rt["can_serve"]
    assert data["coordinator_endpoints"] == {1: [0, 2, 3]}
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    applies = _applies(txn)
    assert len(applies) == 2 and all(a["outcome"] == "ok" for a in applies)  # one per pod with survivors
    accepted = [res["endpoint_id"] for a in applies for res in a["apply_results"] if res["http_status"] == 202]
    assert sorted(accepted) == [0, 2, 3]  # one 202 per survivor
    assert all(a["ranks"] == [1] and a["endpoint_ids"] for a in applies)
    assert all(res["engine_request_id"] for a in applies for res in a["apply_results"])
    assert not data["pod_stops"]  # pod 127.0.0.2 still hosts rank 0
    _assert_typed_grpc_timeline(cluster)
    counts = load.counts()
    artifacts.record("load", counts)
    assert counts["succeeded"] > 0 and counts["failed"] == 0, counts
    _assert_round_metrics(before, after, txn)
    _assert_retired_after_commit(cluster, artifacts)
    _infer(cluster, artifacts, [0, 2, 3])


def _assert_round_metrics(before, after, txn) -> None:
    """One successful round of rank 1's executor death under load, in every service's /metrics."""
    c0, c1 = before["controller"], after["controller"]

    # Controller: one successful round, one observation of every stage, no fallback.
    assert delta(c1, c0, get, "motor_strategy_runs_total", strategy="dp_scale_down", outcome="succeeded") == 1
    assert delta(c1, c0, total, "motor_strategy_runs_total") == 1
    for stage in SCALE_DOWN_STAGES:
        assert delta(c1, c0, get, "motor_scale_down_stage_seconds_count", stage=stage) == 1, stage
    assert delta(c1, c0, get, "motor_fault_to_published_seconds_count") == 1
    assert delta(c1, c0, total, "motor_fallback_total") == 0
    assert delta(c1, c0, total, "motor_gate_rejections_total") == 0
    # Evidence exactly as the round's timeline lists it (rank 1 DEAD, the survivors UNHEALTHY).
    kinds = [e["evidence_kind"] for e in txn["events"] if e["event_kind"] == "EVIDENCE"]
    assert kinds.count("DEAD") == 1
    for kind in set(kinds):
        assert delta(c1, c0, get, "motor_evidence_total", kind=kind) == kinds.count(kind), kind
    # Runtime gauges: phase back to SCALED_DOWN_RUNNING (one-hot), three ranks alive, one committed dead.
    for phase in FtPhase:
        assert get(c1, "motor_ft_phase", instance_id="1", phase=str(phase)) == (phase is FtPhase.SCALED_DOWN_RUNNING)
    assert get(c1, "motor_alive_dp_ranks", instance_id="1") == 3
    assert get(c1, "motor_dead_committed_ranks", instance_id="1") == 1
    assert get(c1, "motor_can_serve", instance_id="1") == 1
    assert delta(c1, c0, get, "motor_ft_transitions_total", instance_id="1", from_phase="NORMAL", to_phase="DECIDING") == 1
    assert delta(c1, c0, get, "motor_ft_transitions_total", instance_id="1", from_phase="POST_SCALE_CLEANUP",
                 to_phase="SCALED_DOWN_RUNNING") == 1
    assert delta(c1, c0, get, "motor_publications_total", event="DEL") == 1
    assert delta(c1, c0, get, "motor_publications_total", event="ADD") == 1
    assert delta(c1, c0, total, "motor_publish_failures_total") == 0

    # NodeManagers: one apply call per pod with survivors, one accepted engine apply per survivor,
    # one commit per pod; every guard released; the dead rank reported once.
    assert delta(after, before, nm_total, "motor_nodemanager_apply_calls_total", outcome="accepted") == 2
    assert delta(after, before, nm_total, "motor_nodemanager_apply_calls_total") == 2
    assert delta(after, before, nm_total, "motor_nodemanager_engine_applies_total", outcome="accepted") == 3
    assert delta(after, before, nm_total, "motor_nodemanager_engine_applies_total") == 3
    assert delta(after, before, nm_total, "motor_nodemanager_finalizes_total", decision="commit") == 2
    assert nm_total(after, "motor_nodemanager_guard_held") == 0
    assert delta(after, before, nm_total, "motor_nodemanager_fault_reports_sent_total", kind="DEAD") == 1
    assert delta(after, before, nm_total, "motor_nodemanager_fault_reports_dropped_total") == 0
    # Executor death leaves the process up; the only exit is the retired engine, stopped on purpose.
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="true") == 1
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="false") == 0
    assert delta(after, before, nm_total, "motor_nodemanager_status_polls_total") > 0
    assert delta(after, before, nm_total, "motor_nodemanager_status_poll_seconds_count") == \
        delta(after, before, nm_total, "motor_nodemanager_status_polls_total")
    # Every report a NodeManager saw answered was received by the Controller (NodeManagers were scraped
    # first, so the Controller's count can only be ahead).
    for kind in ("DEAD", "UNHEALTHY"):
        assert delta(c1, c0, get, "motor_fault_reports_total", kind=kind) >= \
            delta(after, before, nm_total, "motor_nodemanager_fault_reports_sent_total", kind=kind), kind

    # Coordinator: requests served through the round, none lost; the survivors routed again.
    o0, o1 = before["coordinator"], after["coordinator"]
    served = delta(o1, o0, total, "motor_coordinator_requests_total", outcome="served", code="200")
    assert served > 0 and served == delta(o1, o0, total, "motor_coordinator_requests_total")
    assert delta(o1, o0, total, "motor_coordinator_request_seconds_count") == served
    assert get(o1, "motor_coordinator_published_endpoints", instance_id="1") == 3
    assert get(o1, "motor_coordinator_routable_endpoints", instance_id="1") == 3
    assert get(o1, "motor_coordinator_holding_requests") == 0


def _assert_retired_after_commit(cluster, artifacts) -> None:
    """The heartbeat's view after the commit: rank 1 retired on its pod, the FT proxy refuses it."""
    address = f"127.0.0.2:{cluster.nodemanagers['127.0.0.2'].info['grpc_port']}"
    with cluster.grpc_channel(address, Role.CONTROLLER) as channel:  # the FT proxy is the Controller's
        pod = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(), timeout=5)
        ft = node_manager_pb2_grpc.NodeManagerFaultToleranceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            ft.Status(node_manager_pb2.StatusRequest(instance_id=1, endpoint_ids=[1]), timeout=5)
    artifacts.record("describe_pod", json.loads(json.dumps([{"id": e.endpoint.id, "retired": e.retired} for e in pod.engines])))
    assert {e.endpoint.id: e.retired for e in pod.engines} == {0: False, 1: True}
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    refusal = info.value.details()
    assert "retired" in refusal and "[1]" in refusal, refusal


def test_rank0_new_master_and_consecutive_rounds(start_cluster, artifacts) -> None:
    cluster = start_cluster()
    load = cluster.load_generator(concurrency=2, max_tokens=8, max_duration_sec=150).start()
    try:
        artifacts.injection(cluster, 1, "executor_death")
        cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
        artifacts.injection(cluster, 0, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[2, 3])
    finally:
        load.stop()
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [0, 1] and rt["original_dp_ranks"] == [0, 1, 2, 3]
    second = data["controller_timeline"][-1]
    applies = _applies(second)
    # Cumulative list, new master = lowest survivor (rank 2 on 127.0.0.3), original ids kept.
    assert applies and all(a["ranks"] == [0, 1] and a["dp_master_ip"] == "127.0.0.3" for a in applies)
    assert len(applies) == 1 and applies[0]["target"].startswith("127.0.0.3:")  # the only pod with survivors
    # Pod 127.0.0.2 is emptied but scale-up is off: kept (缩卡不缩 Pod).
    assert not data["pod_stops"]
    assert cluster.nodemanagers["127.0.0.2"].proc.running
    sets = counter(cluster, "motor_publications_total", event="SET")
    wait_for(lambda: counter(cluster, "motor_publications_total", event="SET") > sets, 30.0,
             "a periodic SET after the second round")
    assert cluster.published() == {1: [2, 3]}
    counts = load.counts()
    artifacts.record("load", counts)
    assert counts["failed"] == 0, counts
    _infer(cluster, artifacts, [2, 3])


@pytest.mark.parametrize(("scale_up", "engines"), [(False, "reference"), (True, "light")],
                         ids=["False-reference", "True-light"])
def test_pod_emptied_in_one_round_with_two_dead(start_cluster, artifacts, scale_up: bool, engines: str) -> None:
    cluster = start_cluster(engines=engines, enable_dp_scale_up=scale_up)
    # With scale-up on, the emptied pod's NodeManager is told to stop and exits.
    cluster.nodemanagers["127.0.0.2"].expected_exit = scale_up
    load = cluster.load_generator(concurrency=2, max_tokens=8, max_duration_sec=120).start()
    try:
        artifacts.injection(cluster, 0, "executor_death")
        artifacts.injection(cluster, 1, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[2, 3])
        _wait_served_after(load, time.time(), n=2 * load.concurrency)  # traffic on the survivors
    finally:
        load.stop()
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [0, 1]
    rounds = [t for t in data["controller_timeline"] if t["strategy"] == "dp_scale_down"]
    # Both dead ranks leave in rounds that each sent exactly one apply per pod with survivors.
    assert all(t["outcome"] == "succeeded" for t in rounds)
    assert any(a["ranks"] == [0, 1] for t in rounds for a in _applies(t))
    if scale_up:
        assert len(data["pod_stops"]) == 1 and data["pod_stops"][0]["target"].startswith("127.0.0.2")
        assert cluster.nodemanagers["127.0.0.2"].proc.wait_exit(15) == 0
    else:
        assert not data["pod_stops"]
        assert cluster.nodemanagers["127.0.0.2"].proc.running
    _infer(cluster, artifacts, [2, 3])
