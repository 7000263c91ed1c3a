"""The Controller's metrics against in-memory peers and a manual clock: fed by the typed timeline and
the runtime broadcasts, so they agree with the timeline page; valid exposition format."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.stages import SCALE_DOWN_STAGES, scale_down_stages
from motor.controller.hardware.model import HardwareFault
from motor.controller.metrics import run_outcome
from motor.controller.model.runtime import FtPhase

from .controller_fakes import FakeCoordinator, assemble, make_core, settle, two_pods


def value(core, name: str, **labels: str) -> float:
    found = core.metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def report(core, rank: int, kind: int) -> None:
    core.report_software_fault(controller_pb2.ReportSoftwareFaultRequest(
        pod_ip="127.0.0.2", instance_id=7, endpoint_id=rank, kind=kind, evidence="test",
        observed_at_unix_sec=core.clock.wall()), EvidenceKind(controller_pb2.SoftwareFaultKind.Name(kind)
                                                              .removeprefix("SOFTWARE_FAULT_KIND_")))


async def scale_down_rank1(core, cluster, clock) -> None:
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    report(core, 1, controller_pb2.SOFTWARE_FAULT_KIND_DEAD)
    clock.advance(0.25)
    for r in (0, 2, 3):
        report(core, r, controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY)
    clock.advance(0.5)
    await core.faults.evaluate_all()
    await settle(core)


async def test_a_scale_down_round_moves_every_metric_once() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    assert value(core, "motor_ft_phase", instance_id="7", phase="NORMAL") == 1
    assert value(core, "motor_alive_dp_ranks", instance_id="7") == 4
    assert value(core, "motor_publications_total", event="ADD") == 1

    await scale_down_rank1(core, cluster, clock)

    assert core.runtimes.get(7).phase is FtPhase.SCALED_DOWN_RUNNING
    assert value(core, "motor_strategy_runs_total", strategy="dp_scale_down", outcome="succeeded") == 1
    assert value(core, "motor_fault_reports_total", kind="DEAD") == 1
    assert value(core, "motor_fault_reports_total", kind="UNHEALTHY") == 3
    assert value(core, "motor_evidence_total", kind="DEAD") == 1
    assert value(core, "motor_evidence_total", kind="UNHEALTHY") == 3
    # One-hot phase, ranks and publication from the runtime broadcasts.
    phases = {p: value(core, "motor_ft_phase", instance_id="7", phase=str(p)) for p in FtPhase}
    assert phases == {p: (1.0 if p is FtPhase.SCALED_DOWN_RUNNING else 0.0) for p in FtPhase}
    assert value(core, "motor_alive_dp_ranks", instance_id="7") == 3
    assert value(core, "motor_dead_committed_ranks", instance_id="7") == 1
    assert value(core, "motor_can_serve", instance_id="7") == 1
    assert value(core, "motor_serving_published", instance_id="7") == 1
    for a, b in (("NORMAL", "DECIDING"), ("DECIDING", "SCALING_DOWN"), ("SCALING_DOWN", "POST_SCALE_CLEANUP"),
                 ("POST_SCALE_CLEANUP", "SCALED_DOWN_RUNNING")):
        assert value(core, "motor_ft_transitions_total", instance_id="7", from_phase=a, to_phase=b) == 1, (a, b)
    assert value(core, "motor_publications_total", event="DEL") == 1
    assert value(core, "motor_publications_total", event="ADD") == 2
    assert value(core, "motor_fallback_total", reason="STRATEGY_FAILED") == 0
    # Every stage once, with exactly the durations the timeline page's transaction gives.
    txn = core.timelines.transactions(7)[-1].proto
    stages = {s.name: s.duration_sec for s in scale_down_stages(txn)}
    assert list(stages) == list(SCALE_DOWN_STAGES)
    assert stages["detection"] == 0 and stages["decision"] == 0.75  # the reports' receipt times
    for name, seconds in stages.items():
        assert value(core, "motor_scale_down_stage_seconds_count", stage=name) == 1, name
        assert value(core, "motor_scale_down_stage_seconds_sum", stage=name) == seconds, name
    assert value(core, "motor_fault_to_published_seconds_count") == 1
    assert value(core, "motor_fault_to_published_seconds_sum") == sum(stages.values())


async def test_gate_refusal_counts_the_reason_the_failed_round_and_the_fallback_cause() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, coordinator=coord)
    await assemble(core, cluster, redundant=0)
    await scale_down_rank1(core, cluster, clock)

    assert [t.strategy for t in core.timelines.transactions(7)] == ["dp_scale_down", "instance_reconfiguration"]
    assert value(core, "motor_strategy_runs_total", strategy="dp_scale_down", outcome="failed") == 1
    assert value(core, "motor_strategy_runs_total", strategy="instance_reconfiguration", outcome="succeeded") == 1
    assert value(core, "motor_gate_rejections_total", reason="EXPERT_REDUNDANCY_REQUIRED") == 1
    assert value(core, "motor_fallback_total", reason="STRATEGY_FAILED") == 1
    # The fallback lists the round's evidence again; it is counted once.
    assert value(core, "motor_evidence_total", kind="DEAD") == 1
    assert value(core, "motor_evidence_total", kind="UNHEALTHY") == 3
    # Only successful rounds have stages.
    assert value(core, "motor_scale_down_stage_seconds_count", stage="guard") == 0
    assert value(core, "motor_ft_transitions_total", instance_id="7", from_phase="RECONFIGURING", to_phase="NORMAL") == 1
    assert value(core, "motor_ft_phase", instance_id="7", phase="NORMAL") == 1
    assert value(core, "motor_alive_dp_ranks", instance_id="7") == 4


async def test_publication_failures_are_counted_by_event() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    coord.down = True
    await assemble(core, cluster)
    assert value(core, "motor_publish_failures_total", event="ADD") == 1
    assert value(core, "motor_serving_published", instance_id="7") == 0
    assert value(core, "motor_can_serve", instance_id="7") == 0
    coord.down = False
    await core.publish_all()
    assert value(core, "motor_publications_total", event="SET") == 1
    assert value(core, "motor_can_serve", instance_id="7") == 1


async def test_hardware_faults_by_level_and_mapping_duplicates_left_out() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)

    def card(npu: str, level: int, t: float) -> HardwareFault:
        return HardwareFault(node_name="node-127.0.0.2", npu_name=npu, fault_codes=("80E18402",), level=level,
                             fault_time_unix_sec=t, source="test")

    core.faults.report_hardware([card("Ascend910-1", 5, 1.0), card("Ascend910-1", 5, 1.0)])
    core.faults.report_hardware([card("Ascend910-0", 2, 2.0), card("Ascend910-7", 6, 3.0)])
    assert value(core, "motor_hardware_faults_total", level="L5", mapped="true") == 1
    assert value(core, "motor_hardware_faults_total", level="L2", mapped="false") == 1
    assert value(core, "motor_hardware_faults_total", level="L6", mapped="false") == 1  # a card no rank uses


async def test_exposition_parses_and_every_family_is_motor_prefixed() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    await scale_down_rank1(core, cluster, clock)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(core.metrics.registry).decode())}
    assert {"motor_ft_phase", "motor_ft_transitions", "motor_strategy_runs", "motor_fallback",
            "motor_scale_down_stage_seconds", "motor_fault_to_published_seconds", "motor_alive_dp_ranks",
            "motor_dead_committed_ranks", "motor_evidence", "motor_publish_failures", "motor_gate_rejections",
            "motor_hardware_faults"} <= set(families)
    assert all(name.startswith("motor_") for name in families)
    labels = {k for f in families.values() for s in f.samples for k in s.labels}
    assert "request_id" not in labels and "instance" not in labels


def test_run_outcome_labels_are_bounded() -> None:
    assert run_outcome("succeeded") == "succeeded"
    assert run_outcome("failed: gate refused: EXPERT_REDUNDANCY_REQUIRED") == "failed"
    assert run_outcome("failed: preempted by a higher-priority strategy") == "preempted"
    assert run_outcome("failed: cancelled: preempted") == "preempted"
