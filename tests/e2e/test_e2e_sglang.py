"""RFC §8 rows on the SGLang-shaped reference engine (docs/engine-dialects.md): one instance FT
manager (`motor.sim.instance_ft`) in front of real ranks with real gloo groups, and NodeManagers
that speak the `sglang` dialect to it. Pod block 127.0.0.80.

Each row checks what differs from the per-rank dialects: one apply per round to the manager (from
the lowest survivor's pod), the manager told only the round's ranks, a 409 while busy sent again,
a failure after the 202 read from the sticky top-level `ft_error` of the round's request id,
inference through the manager's one endpoint with the rank pinned (`routed_dp_rank`), and a
whole-instance reconfiguration after an idle death bringing back the ranks the manager no longer
expected, and the feature off as the baseline."""

from __future__ import annotations

import json
import urllib.request

import pytest
from .watch import LastErrors, calls, counter, infer_all_ranks, strategies, wait_reconfigured

from motor.cli.engine_check import check_engine
from motor.launch.load import trigger_traffic
from motor.launch.sglang_engines import SglangEngines
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(240)

ROUND_SEC = 60.0
POD_BLOCK = 80
FAST = {
    "fault_tolerance_config.software_status_collection_timeout_sec": 6.0,
    "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 8.0,
}


def _manager(engines: SglangEngines, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(engines.manager_url(1) + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _start(start_cluster, **kwargs):
    engines = SglangEngines()
    cluster = start_cluster(engines=engines, first_pod_ip=POD_BLOCK, **kwargs)
    return cluster, engines


def _pinned(engines: SglangEngines, rank: int) -> int:
    """Inference requests that reached the manager naming `rank` in routed_dp_rank (admitted or not)."""
    return int(_manager(engines, "/motor/admin/state")["pinned_requests"].get(str(rank), 0))


def _round_applies(engines: SglangEngines, request_id: str) -> list[dict]:
    return [a for a in _manager(engines, "/motor/admin/state")["applies"] if a["request_id"] == request_id]


def _under_load(cluster, artifacts, faults: list[tuple[int, list[int]]]) -> dict:
    """Executor deaths under load, each followed by its round; the load must lose nothing."""
    load = cluster.load_generator(concurrency=3, max_tokens=8, max_duration_sec=150).start()
    try:
        wait_for(lambda: load.counts()["succeeded"] >= 6, 60.0, "completions under load")
        for rank, alive in faults:
            artifacts.injection(cluster, rank, "executor_death")
            rt = cluster.wait_serving(ROUND_SEC, alive=alive)
    finally:
        load.stop()
    counts = load.counts()
    artifacts.record("load", counts)
    assert counts["succeeded"] > 0 and counts["failed"] == 0, counts
    return rt


def test_sglang_ordinary_rank_under_load_one_apply_to_a_busy_manager(start_cluster, artifacts) -> None:
    cluster, engines = _start(start_cluster)
    # engine-check's probes (retry, a whitespace-only id, a second apply) leave sticky errors of
    # their own request ids, which the round below must not take for its own.
    report = check_engine(engines.manager_url(1), try_retry=True)
    artifacts.record("engine_check", report.render())
    assert report.conforms, report.render()
    assert any(text.startswith("dialect: sglang (detected)") for _, text in report.lines)
    wait_for(lambda: "ft_error" in _manager(engines, "/v1/fault_tolerance/status"), 10.0, "the probes' sticky error")
    # The manager answers the round's first two applies 409 (another FT operation runs).
    _manager(engines, "/motor/admin/inject", {"fault": "busy_next_applies", "count": 2})
    rt = _under_load(cluster, artifacts, [(1, [0, 2, 3])])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1] and data["coordinator_endpoints"] == {1: [0, 2, 3]}
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    applies = [e for e in txn["events"] if e["name"] == "apply"]
    assert len(applies) == 2  # the Controller's round is unchanged: one Apply per pod with survivors
    results = [r for a in applies for r in a["apply_results"]]
    assert [(r["endpoint_id"], r["http_status"]) for r in results] == [(0, 202)]  # one POST, by rank 0's pod
    assert json.loads(results[0]["request_body"]) == {
        "instruction": "scale_down", "params": {"removed_dp_ranks": [1]}, "request_id": txn["request_id"]}
    # Sent again while busy, within the call's deadline: the same request, then its 202.
    assert [a["http_status"] for a in _round_applies(engines, txn["request_id"])] == [409, 409, 202]
    status = _manager(engines, "/v1/fault_tolerance/status")
    assert [e["status"] for e in status["engines"]] == ["healthy", "dead", "healthy", "healthy"]
    assert status["last_ft_request_id"] == txn["request_id"] and "ft_error" not in status


def test_sglang_rank0_then_a_consecutive_round(start_cluster, artifacts) -> None:
    cluster, engines = _start(start_cluster)
    rt = _under_load(cluster, artifacts, [(1, [0, 2, 3]), (0, [2, 3])])
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [0, 1] and data["coordinator_endpoints"] == {1: [2, 3]}
    second = data["controller_timeline"][-1]
    results = [r for e in second["events"] if e["name"] == "apply" for r in e["apply_results"]]
    # Rank 2 (pod 127.0.0.81) is the lowest survivor now; the manager is told rank 0 only.
    assert [(r["endpoint_id"], r["http_status"]) for r in results] == [(2, 202)]
    assert json.loads(results[0]["request_body"])["params"] == {"removed_dp_ranks": [0]}
    assert _manager(engines, "/motor/admin/state")["expected"] == [False, False, True, True]


def test_sglang_failed_scale_down_falls_back_with_the_code(start_cluster, artifacts) -> None:
    code = "scale_down_requires_unresolved_expected_dp_fault"
    cluster, engines = _start(start_cluster, controller_overrides=FAST)
    _manager(engines, "/motor/admin/inject", {"fault": "fail_next_apply", "ft_error": code})
    watch = LastErrors(cluster, cluster.spec.instance_id)
    load = cluster.load_generator(concurrency=3, max_tokens=8, max_duration_sec=150).start()
    try:
        wait_for(lambda: load.counts()["succeeded"] >= 6, 60.0, "completions under load")
        artifacts.injection(cluster, 1, "executor_death")
        rt = wait_reconfigured(cluster, 150.0)
    finally:
        load.stop()
        watch.close()
    data = artifacts.collect(cluster)
    artifacts.record("last_errors_seen", watch.values)
    first = data["controller_timeline"][0]
    assert (first["strategy"], first["outcome"].split(":")[0]) == ("dp_scale_down", "failed")
    assert code in first["outcome"], first["outcome"]
    assert any(code in value for value in watch.values), watch.values
    finalizes = [e for e in first["events"] if e["name"] == "finalize"]
    assert finalizes and not any(e["commit"] for e in finalizes)
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["dead_committed"] == []
    status = _manager(engines, "/v1/fault_tolerance/status")
    assert [e["status"] for e in status["engines"]] == ["healthy"] * 4


def test_sglang_requests_pinned_through_the_manager_and_none_to_the_removed_rank(start_cluster, artifacts) -> None:
    cluster, engines = _start(start_cluster)
    host, port = engines.managers[1]
    with urllib.request.urlopen(cluster.coordinator_http + "/coordinator/instances", timeout=10) as resp:
        listed = json.loads(resp.read())["instances"][0]["endpoints"]
    assert [e["instance_route"] for e in listed] == [{"host": host, "port": port}] * 4
    load = cluster.load_generator(concurrency=3, max_tokens=8, max_duration_sec=150).start()
    try:
        wait_for(lambda: load.counts()["succeeded"] >= 6 and _pinned(engines, 1) > 0, 60.0,
                 "completions under load, some pinned to rank 1")
        artifacts.injection(cluster, 1, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
        # The round is over, the drain long before it: rank 1 is never named again while the load
        # goes on over the survivors.
        after_round, served = _pinned(engines, 1), load.counts()["succeeded"]
        wait_for(lambda: load.counts()["succeeded"] >= served + 12, 60.0, "completions after the round")
        state = _manager(engines, "/motor/admin/state")
    finally:
        load.stop()
    counts = load.counts()
    artifacts.record("load", counts)
    artifacts.record("manager_inference", {k: state[k] for k in ("pinned_requests", "unpinned_requests",
                                                                  "forwarded_requests", "active_ranks")})
    assert counts["succeeded"] > 0 and counts["failed"] == 0, counts
    assert int(state["pinned_requests"].get("1", 0)) == after_round
    assert state["active_ranks"] == [0, 2, 3]
    data = artifacts.collect(cluster)
    assert rt["dead_committed"] == [1] and data["coordinator_endpoints"] == {1: [0, 2, 3]}
    assert data["controller_timeline"][-1]["outcome"] == "succeeded"
    assert state["unpinned_requests"] == 0  # every request the Coordinator sent named its rank


def test_sglang_two_dead_in_one_apply_then_an_idle_death_reconfigures_every_rank_back(start_cluster, artifacts) -> None:
    cluster, engines = _start(start_cluster, controller_overrides=FAST)
    # Ranks 0 and 1 die while the instance is idle; the first request then makes the survivors
    # unhealthy: one round sees both dead, and pod 127.0.0.80 is emptied.
    artifacts.injection(cluster, 0, "executor_death")
    artifacts.injection(cluster, 1, "executor_death")
    wait_for(lambda: [e["status"] for e in _manager(engines, "/v1/fault_tolerance/status")["engines"]][:2] == [
        "dead", "dead"], 30.0, "ranks 0 and 1 dead at the manager")
    wait_for(lambda: counter(cluster, "motor_fault_reports_total") >= 1, 30.0, "the deaths reported")
    trigger = trigger_traffic(cluster)
    rt = cluster.wait_serving(ROUND_SEC, alive=[2, 3])
    trigger.join(ROUND_SEC)  # its request, held through the round, is answered: the instance is idle again
    assert not trigger.is_alive()
    assert rt["dead_committed"] == [0, 1] and cluster.nodemanagers["127.0.0.80"].proc.running  # not stopped
    first = cluster.timeline()[-1]
    results = [r for e in first["events"] if e["name"] == "apply" for r in e["apply_results"]]
    # One POST with both ranks, by the pod of rank 2, the lowest survivor now (the manager's rank 0 is dead).
    assert [(r["endpoint_id"], r["http_status"]) for r in results] == [(2, 202)]
    assert json.loads(results[0]["request_body"])["params"] == {"removed_dp_ranks": [0, 1]}
    assert _manager(engines, "/motor/admin/state")["expected"] == [False, False, True, True]

    # Rank 3 dies with no traffic: its survivor stays healthy, so no round, no apply; the
    # collection timeout reconfigures the instance, and the manager expects every rank again.
    # The trigger's answer can come before the group's last steps of its wave: a death inside the
    # wave would make rank 2 unhealthy (a round, not the idle path this row is about).
    wait_for(lambda: not any(s["wave"]["active"] or s["in_flight_requests"]
                             for s in (cluster.engine_client(r).admin_state() for r in (2, 3))),
             30.0, "ranks 2 and 3 idle, no wave running")
    reports = counter(cluster, "motor_fault_reports_total")
    artifacts.injection(cluster, 3, "executor_death")
    wait_for(lambda: counter(cluster, "motor_fault_reports_total") > reports, 30.0, "rank 3's fault report")
    assert cluster.runtime()["phase"] == "SCALED_DOWN_RUNNING"
    rt = wait_reconfigured(cluster, 150.0)
    data = artifacts.collect(cluster)
    assert strategies(data) == [("dp_scale_down", "succeeded"), ("instance_reconfiguration", "succeeded")]
    assert len(calls(data, "apply")) == 1  # the first round's, to its one pod with survivors; none since
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["dead_committed"] == []
    state = _manager(engines, "/motor/admin/state")
    assert state["expected"] == [True] * 4 and [a["removed_dp_ranks"] for a in state["applies"]] == [[0, 1]]
    status = _manager(engines, "/v1/fault_tolerance/status")
    assert [e["status"] for e in status["engines"]] == ["healthy"] * 4
    infer_all_ranks(cluster, artifacts)
    wait_for(lambda: _manager(engines, "/motor/admin/state")["active_ranks"] == [0, 1, 2, 3], 10.0,
             "every rank active at the manager")


def test_sglang_feature_off_is_the_baseline(start_cluster, artifacts) -> None:
    cluster, engines = _start(start_cluster, enable_dp_scale_down=False)
    assert cluster.runtime()["phase"] == "DISABLED"
    artifacts.injection(cluster, 1, "executor_death")
    rt = wait_reconfigured(cluster)
    data = artifacts.collect(cluster)
    assert rt["phase"] == "DISABLED" and strategies(data) == [("instance_reconfiguration", "succeeded")]
    assert not calls(data, "guard") and not calls(data, "apply")
    # The manager was never told anything; the relaunched ranks link to it again and serve, pinned.
    state = _manager(engines, "/motor/admin/state")
    assert state["applies"] == [] and state["expected"] == [True] * 4
    infer_all_ranks(cluster, artifacts)
    wait_for(lambda: _manager(engines, "/motor/admin/state")["active_ranks"] == [0, 1, 2, 3], 10.0,
             "every rank active at the manager")
    assert _manager(engines, "/motor/admin/state")["unpinned_requests"] == 0
