"""RFC §8 rows that must NOT end in a scale-down: idle service, all-UNHEALTHY with fast recovery not
applicable, static gate refusals, engine failure paths, feature off. Each ends in whole-instance
reconfiguration with every original rank serving again, and never retries an apply.

The idle row runs on the reference engines (an idle group does not step, so its survivors stay
healthy; the light group always steps); the others on the light engines, whose placeholders
restart their ranks when the reconfiguration relaunches them. The static gate row also checks the
/metrics of every service through the fallback."""

from __future__ import annotations

import grpc
import pytest
from .service_metrics import delta, get, nm_total, scrape_all, total
from .watch import calls, counter, infer_all_ranks, strategies, wait_reconfigured

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc
from motor.common.security import Role
from motor.launch.load import trigger_traffic
from motor.testing.waits import wait_for


def fallback_cause(txn: dict) -> str:
    return next(e["fallback_cause"] for e in txn["events"] if e["event_kind"] == "DECISION")


pytestmark = pytest.mark.timeout(300)

FAST = {
    "fault_tolerance_config.software_status_collection_timeout_sec": 6.0,
    "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 8.0,
}


def test_idle_death_no_transaction_then_reconfiguration(start_cluster, artifacts) -> None:
    cluster = start_cluster(controller_overrides=FAST)
    artifacts.injection(cluster, 1, "executor_death")
    # The Controller got rank 1's report (the only fault of an idle cluster) before anything is judged.
    wait_for(lambda: counter(cluster, "motor_fault_reports_total") >= 1, 30.0, "rank 1's fault report at the Controller")
    rt = cluster.runtime()
    # Survivors stay HEALTHY without traffic: no complete U+D, so no round, no DEL, no apply.
    assert rt["phase"] == "NORMAL" and rt["dead_committed"] == []
    assert cluster.published() == {1: [0, 1, 2, 3]}
    rt = wait_reconfigured(cluster)
    data = artifacts.collect(cluster)
    assert strategies(data) == [("instance_reconfiguration", "succeeded")]
    assert not calls(data, "apply") and not calls(data, "guard")
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["dead_committed"] == []
    infer_all_ranks(cluster, artifacts)


def test_all_unhealthy_fast_recovery_not_applicable(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light", controller_overrides=FAST)
    for rank in range(4):
        artifacts.injection(cluster, rank, "unhealthy", reason="injected link flap")
    rt = wait_reconfigured(cluster)
    data = artifacts.collect(cluster)
    assert strategies(data) == [("instance_reconfiguration", "succeeded")]
    assert not calls(data, "apply")
    assert fallback_cause(data["controller_timeline"][0]) == "ALL_UNHEALTHY_TIMEOUT"
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3]
    infer_all_ranks(cluster, artifacts)


def test_static_gate_refusal_records_reason_and_falls_back(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light", controller_overrides=FAST, capability={"num_redundant_experts": 0})
    cluster.load_generator(concurrency=1).send_one("warm")
    before = scrape_all(cluster)
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    wait_reconfigured(cluster, 150.0)
    after = scrape_all(cluster)
    artifacts.record("metrics_before", {k: len(v) for k, v in before.items()})
    data = artifacts.collect(cluster)
    assert strategies(data) == [("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    assert data["runtime"]["gate"] == {"allowed": False, "reason_codes": ["EXPERT_REDUNDANCY_REQUIRED"]}
    assert not calls(data, "apply") and not calls(data, "guard")
    _assert_fallback_metrics(before, after)
    infer_all_ranks(cluster, artifacts)


def _assert_fallback_metrics(before, after) -> None:
    """The Controller counts the fallback and its gate reason; nothing was applied; every engine was
    stopped on purpose and started again."""
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
    assert delta(after, before, nm_total, "motor_nodemanager_apply_calls_total") == 0
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="true") == 4
    assert delta(after, before, nm_total, "motor_nodemanager_engine_exits_total", intentional="false") == 0


@pytest.mark.parametrize(
    ("fault", "params", "message"),
    [
        ("fail_next_apply", {"reason": "injected operator failure"}, "injected operator failure"),
        ("stall_next_apply", {}, "not healthy after apply within"),
    ],
)
def test_engine_failure_after_apply_aborts_and_falls_back(start_cluster, artifacts, fault, params, message) -> None:
    cluster = start_cluster(engines="light", controller_overrides=FAST)
    artifacts.injection(cluster, 2, fault, **params)
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    _assert_failed_round_then_fallback(cluster, artifacts, message)


def test_status_query_timeout_during_the_round_aborts_and_falls_back(start_cluster, artifacts) -> None:
    # A long execution deadline: the hung status call must be what ends the round, however late the
    # injection lands on a loaded machine.
    cluster = start_cluster(engines="light", controller_overrides={
        **FAST, "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 25.0})
    # Hold the round in SCALING_DOWN, then make a survivor's status route hang: the strategy's own
    # status query times out (a query error, not engine evidence).
    artifacts.injection(cluster, 2, "stall_next_apply")
    artifacts.injection(cluster, 1, "executor_death")
    trigger_traffic(cluster)
    cluster.wait_until(lambda rt: rt["phase"] == "SCALING_DOWN", 60.0, "SCALING_DOWN")
    artifacts.injection(cluster, 2, "hang_status", duration_sec=20)
    _assert_failed_round_then_fallback(cluster, artifacts, "status to")


def _assert_failed_round_then_fallback(cluster, artifacts, message: str) -> None:
    wait_reconfigured(cluster, 150.0)
    data = artifacts.collect(cluster)
    assert strategies(data) == [("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    first = data["controller_timeline"][0]
    assert message in first["outcome"], first["outcome"]
    applies = [e for e in first["events"] if e["name"] == "apply"]
    assert len(applies) == 2  # one per pod with survivors, never retried
    finalizes = [e for e in first["events"] if e["name"] == "finalize"]
    assert len(finalizes) == 2 and not any(e["commit"] for e in finalizes)
    assert data["runtime"]["dead_committed"] == [] and data["runtime"]["alive_dp_ranks"] == [0, 1, 2, 3]
    infer_all_ranks(cluster, artifacts)


def test_feature_off_is_the_baseline(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light", enable_dp_scale_down=False)
    rt = cluster.runtime()
    assert rt["phase"] == "DISABLED"
    address = f"127.0.0.2:{cluster.nodemanagers['127.0.0.2'].info['grpc_port']}"
    codes = {}
    with cluster.grpc_channel(address, Role.CONTROLLER) as channel:  # the FT proxy is the Controller's
        ft = node_manager_pb2_grpc.NodeManagerFaultToleranceStub(channel)
        for name, call, req in (
            ("Guard", ft.Guard, node_manager_pb2.GuardRequest(request_id="x", lease_sec=10, instance_id=1)),
            ("Status", ft.Status, node_manager_pb2.StatusRequest(instance_id=1, endpoint_ids=[0])),
            ("Apply", ft.Apply, node_manager_pb2.ApplyRequest(instance_id=1, request_id="x")),
            ("Finalize", ft.Finalize, node_manager_pb2.FinalizeRequest(instance_id=1, request_id="x")),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call(req, timeout=5)
            codes[name] = info.value.code().name
    artifacts.record("nm_ft_codes", codes)
    assert set(codes.values()) == {"UNIMPLEMENTED"}
    artifacts.injection(cluster, 1, "executor_death")
    rt = wait_reconfigured(cluster)
    data = artifacts.collect(cluster)
    assert rt["phase"] == "DISABLED"
    assert strategies(data) == [("instance_reconfiguration", "succeeded")]
    assert not calls(data, "guard") and not calls(data, "apply")
    infer_all_ranks(cluster, artifacts)
