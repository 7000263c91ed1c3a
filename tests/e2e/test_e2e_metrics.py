"""/metrics of every service over a real local cluster: scraped before and after a scale-down round
under load (executor death of rank 1) and a static-gate fallback; the counters and histograms move
by exactly what the round did, and every family of every service parses."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from motor.controller.fault_tolerance.stages import SCALE_DOWN_STAGES
from motor.controller.model.runtime import FtPhase
from motor.launch.load import trigger_traffic

pytestmark = pytest.mark.timeout(300)

ROUND_SEC = 60.0
FAST = {
    "fault_tolerance_config.software_status_collection_timeout_sec": 6.0,
    "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 8.0,
}
# What each service must export (family names as the parser gives them: counters without _total).
REQUIRED = {
    "controller": {"motor_ft_phase", "motor_ft_transitions", "motor_strategy_runs", "motor_fallback",
                   "motor_scale_down_stage_seconds", "motor_fault_to_published_seconds", "motor_alive_dp_ranks",
                   "motor_dead_committed_ranks", "motor_evidence", "motor_publish_failures", "motor_gate_rejections",
                   "motor_hardware_faults", "motor_can_serve", "motor_serving_published"},
    "coordinator": {"motor_coordinator_requests", "motor_coordinator_request_seconds", "motor_coordinator_retries",
                    "motor_coordinator_held_requests", "motor_coordinator_hold_seconds",
                    "motor_coordinator_routable_endpoints", "motor_coordinator_in_flight_requests"},
    "nodemanager": {"motor_nodemanager_status_polls", "motor_nodemanager_status_poll_seconds",
                    "motor_nodemanager_status_poll_errors", "motor_nodemanager_fault_reports_sent",
                    "motor_nodemanager_fault_reports_taken",
                    "motor_nodemanager_fault_report_retries", "motor_nodemanager_fault_reports_dropped",
                    "motor_nodemanager_engine_exits", "motor_nodemanager_guard_held",
                    "motor_nodemanager_apply_calls", "motor_nodemanager_engine_applies"},
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_all(cluster) -> dict[str, Samples]:
    """Every service's samples; each exposition must parse, with motor_ names and bounded labels."""
    out: dict[str, Samples] = {}
    for name in cluster.metrics_urls():
        families = list(text_string_to_metric_families(cluster.scrape(name)))
        kind = name.split("-")[0]
        assert REQUIRED[kind] <= {f.name for f in families}, (name, REQUIRED[kind] - {f.name for f in families})
        for family in families:
            assert family.name.startswith("motor_"), (name, family.name)
            for sample in family.samples:
                assert not {"request_id", "instance"} & set(sample.labels), (name, sample)
        out[name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return out


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def nm_total(scrapes: dict[str, Samples], name: str, **labels: str) -> float:
    return sum(total(s, name, **labels) for svc, s in scrapes.items() if svc.startswith("nodemanager-"))


def delta(after, before, fn, *args, **labels) -> float:
    return fn(after, *args, **labels) - fn(before, *args, **labels)


def test_scale_down_round_moves_every_service_metric(start_cluster, artifacts) -> None:
    cluster = start_cluster()
    load = cluster.load_generator(concurrency=4, max_tokens=8, max_duration_sec=120).start()
    try:
        # Traffic flows (so the survivors' collectives see the death), then the baseline.
        for _ in range(300):
            if load.counts()["succeeded"] >= 8:
                break
            time.sleep(0.05)
        before = scrape_all(cluster)
        artifacts.injection(cluster, 1, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
    finally:
        load.stop()
    # The commit retires rank 1: its NodeManager stops that engine on purpose, in the background.
    for _ in range(150):
        after = scrape_all(cluster)
        if delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="true") >= 1:
            break
        time.sleep(0.2)
    artifacts.record("metrics_before", {k: len(v) for k, v in before.items()})
    data = artifacts.collect(cluster)
    txn = data["controller_timeline"][-1]
    assert rt["phase"] == "SCALED_DOWN_RUNNING" and txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
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
    assert load.counts()["failed"] == 0, load.counts()


def test_static_gate_fallback_counts_its_reason(start_cluster, artifacts) -> None:
    cluster = start_cluster(controller_overrides=FAST, capability={"num_redundant_experts": 0})
    cluster.load_generator(concurrency=1).send_one("warm")
    before = scrape_all(cluster)
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)

    def reconfigured(rt) -> bool:
        return rt["phase"] == "NORMAL" and rt["serving_published"] and any(
            t["strategy"] == "instance_reconfiguration" and t["outcome"] == "succeeded" for t in cluster.timeline())

    cluster.wait_until(reconfigured, 150.0, "whole-instance reconfiguration")
    after = scrape_all(cluster)
    data = artifacts.collect(cluster)
    assert [(t["strategy"], t["outcome"].split(":")[0]) for t in data["controller_timeline"]] == [
        ("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    c0, c1 = before["controller"], after["controller"]
    assert delta(c1, c0, get, "motor_fallback_total", reason="STRATEGY_FAILED") == 1
    assert delta(c1, c0, total, "motor_fallback_total") == 1
    assert delta(c1, c0, get, "motor_gate_rejections_total", reason="EXPERT_REDUNDANCY_REQUIRED") == 1
    assert delta(c1, c0, get, "motor_strategy_runs_total", strategy="dp_scale_down", outcome="failed") == 1
    assert delta(c1, c0, get, "motor_strategy_runs_total", strategy="instance_reconfiguration", outcome="succeeded") == 1
    assert delta(c1, c0, total, "motor_scale_down_stage_seconds_count") == 0  # only successful rounds have stages
    assert get(c1, "motor_ft_phase", instance_id="1", phase="NORMAL") == 1
    assert get(c1, "motor_alive_dp_ranks", instance_id="1") == 4
    assert get(c1, "motor_dead_committed_ranks", instance_id="1") == 0
    assert delta(c1, c0, get, "motor_ft_transitions_total", instance_id="1", from_phase="RECONFIGURING",
                 to_phase="NORMAL") == 1
    # Nothing was applied; every engine was stopped on purpose and started again.
    assert delta(after, before, nm_total, "motor_nodemanager_apply_calls_total") == 0
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="true") == 4
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="false") == 0
