"""The Controller's Prometheus metrics, in a `CollectorRegistry` the ControllerCore owns.

Two sources, so no number here can disagree with what the pages show:

- the typed timeline (`TimelineObserver`): strategy runs, fallbacks and their cause, gate
  rejections, evidence that entered a transaction, idle-fault probe canaries, requests the
  Coordinator migrated (re-inference), and the stage histograms of
  `fault_tolerance.stages` (the same stages `motorctl timeline` draws);
- the runtime, refreshed on every `changed(instance_id)` broadcast: phase (one-hot), transitions,
  alive and committed-dead ranks, publication and can_serve.

Labels are bounded: instance ids, phases, strategies, outcomes, typed causes and reason codes, never
a request id. The instance label is `instance_id`, since Prometheus itself sets `instance` (the
scrape target) on every series.
"""

from __future__ import annotations

from collections import OrderedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gen.motor.v1 import controller_pb2
from motor.common.authz import count_refusals
from motor.controller.fault_tolerance.stages import SCALE_DOWN_STAGES, fault_to_published_sec, scale_down_stages
from motor.controller.fault_tolerance.timeline import Transaction
from motor.controller.model.runtime import FtPhase, FtRuntime

Kind = controller_pb2.TimelineEventKind

# Stages run from a few milliseconds (an RPC) to tens of seconds (an engine rebuild, a collection
# window); whole rounds from under a second to minutes.
STAGE_BUCKETS_SEC = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ROUND_BUCKETS_SEC = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# Evidence already counted (it is listed again by the fallback that follows a failed round).
_SEEN_EVIDENCE_MAX = 4096


def run_outcome(outcome: str) -> str:
    """A transaction's outcome text → a bounded label. Preemption is told apart because it is not
    the strategy failing ("failed: preempted by ...", "failed: cancelled: preempted")."""
    if outcome == "succeeded":
        return "succeeded"
    if outcome == "running":
        return "running"
    return "preempted" if "preempted" in outcome else "failed"


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        count_refusals(r)
        self.phase = Gauge("motor_ft_phase", "1 for the instance's current FT phase, 0 for the others",
                           ["instance_id", "phase"], registry=r)
        self.transitions = Counter("motor_ft_transitions_total", "FT phase changes seen by the Controller",
                                   ["instance_id", "from_phase", "to_phase"], registry=r)
        self.alive_ranks = Gauge("motor_alive_dp_ranks", "Original DP ranks serving (alive_dp_ranks)",
                                 ["instance_id"], registry=r)
        self.dead_committed = Gauge("motor_dead_committed_ranks", "Original DP ranks committed dead",
                                    ["instance_id"], registry=r)
        self.can_serve = Gauge("motor_can_serve", "1 when the instance can serve (RFC §7 can_serve)",
                               ["instance_id"], registry=r)
        self.serving_published = Gauge("motor_serving_published",
                                       "1 when every required publisher acknowledged the instance's serving view",
                                       ["instance_id"], registry=r)
        self.strategy_runs = Counter("motor_strategy_runs_total", "Recovery transactions by strategy and outcome",
                                     ["strategy", "outcome"], registry=r)
        self.fallbacks = Counter("motor_fallback_total", "Whole-instance reconfigurations by typed cause",
                                 ["reason"], registry=r)
        self.gate_rejections = Counter("motor_gate_rejections_total",
                                       "Scale-down gate refusals, one per failed condition", ["reason"], registry=r)
        self.evidence = Counter("motor_evidence_total", "Fault evidence that entered a recovery transaction",
                                ["kind"], registry=r)
        self.fault_reports = Counter("motor_fault_reports_total",
                                     "Software fault reports received (each of a ReportSoftwareFaults call too)",
                                     ["kind"], registry=r)
        self.stage_seconds = Histogram("motor_scale_down_stage_seconds",
                                       "Stages of successful scale-down rounds (see fault_tolerance.stages)",
                                       ["stage"], buckets=STAGE_BUCKETS_SEC, registry=r)
        for stage in SCALE_DOWN_STAGES:  # every stage exported from the start: a dashboard's rate() needs the zero
            self.stage_seconds.labels(stage)
        self.fault_to_published = Histogram("motor_fault_to_published_seconds",
                                            "Successful scale-down rounds: first NodeManager observation of the "
                                            "fault to the survivors' publication", buckets=ROUND_BUCKETS_SEC,
                                            registry=r)
        self.restore_seconds = Histogram("motor_capacity_restore_seconds",
                                         "Capacity restorations (motor_strategy_runs_total{strategy=\"capacity_restore\"} "
                                         "counts them by outcome): request to every original rank published",
                                         buckets=ROUND_BUCKETS_SEC, registry=r)
        self.publications = Counter("motor_publications_total", "Refresh calls to the Coordinator by event",
                                    ["event"], registry=r)
        self.publish_failures = Counter("motor_publish_failures_total",
                                        "Refresh calls to the Coordinator that failed, by event", ["event"],
                                        registry=r)
        # Publishers other than the Coordinator (motor.controller.publishers): bounded by configuration.
        self.publisher_calls = Counter("motor_publisher_calls_total",
                                       "Calls to a serving publisher's peer (vllm-router's worker API), after their "
                                       "retries, by publisher, call and outcome", ["publisher", "call", "outcome"],
                                       registry=r)
        self.publisher_up = Gauge("motor_publisher_up", "1 when the publisher's last call succeeded, 0 when it failed",
                                  ["publisher"], registry=r)
        self.publisher_repairs = Counter("motor_publisher_repairs_total",
                                         "Workers the reconcile loop re-added or removed because the router had "
                                         "drifted from the serving view", ["publisher", "action"], registry=r)
        self.idle_fault_probes = Counter("motor_idle_fault_probes_total",
                                         "Idle-fault probe canaries (in the timeline of the transaction that ended "
                                         "their window), by outcome: engine_failed (the survivors noticed), served, "
                                         "timeout, error (the Coordinator call failed)", ["outcome"], registry=r)
        self.reinference = Counter("motor_reinference_migrated_requests_total",
                                   "Requests the Coordinator continued elsewhere (re-inference) because an engine of "
                                   "the instance faulted under them, as recorded at the end of each transaction",
                                   ["instance_id"], registry=r)
        self.hardware_faults = Counter("motor_hardware_faults_total",
                                       "Hardware faults taken in (duplicates left out), by level and whether "
                                       "they mapped to ranks of an instance", ["level", "mapped"], registry=r)
        # Leadership among Controller replicas (motor.controller.election); 1 without election.
        self.leader = Gauge("motor_controller_leader", "1 while this Controller replica leads and acts, else 0",
                            registry=r)
        self.leader_term = Gauge("motor_controller_leader_term",
                                 "Fencing term of this replica's leadership (0 when standing by or without election)",
                                 registry=r)
        self.leadership_changes = Counter("motor_controller_leadership_changes_total",
                                          "Terms this replica took over (elected) and gave up (deposed)", ["event"],
                                          registry=r)
        self.takeover_seconds = Histogram("motor_controller_takeover_seconds",
                                          "Won term to acting: the store restored and the FaultManager started",
                                          buckets=STAGE_BUCKETS_SEC, registry=r)
        self.not_leader_refusals = Counter("motor_controller_not_leader_refusals_total",
                                           "Actions refused because this replica did not lead at that moment",
                                           ["kind"], registry=r)
        self._leading = False
        self._last_phase: dict[int, FtPhase] = {}
        self._seen_evidence: OrderedDict[tuple, None] = OrderedDict()

    # ---- runtime ---------------------------------------------------------------------------

    def observe_runtime(self, runtime: FtRuntime | None) -> None:
        if runtime is None:
            return
        iid = str(runtime.instance_id)
        previous = self._last_phase.get(runtime.instance_id)
        if previous is not None and previous is not runtime.phase:
            self.transitions.labels(iid, str(previous), str(runtime.phase)).inc()
        self._last_phase[runtime.instance_id] = runtime.phase
        for phase in FtPhase:
            self.phase.labels(iid, str(phase)).set(1 if phase is runtime.phase else 0)
        self.alive_ranks.labels(iid).set(len(runtime.alive_dp_ranks))
        self.dead_committed.labels(iid).set(len(runtime.dead_committed))
        self.can_serve.labels(iid).set(1 if runtime.can_serve else 0)
        self.serving_published.labels(iid).set(1 if runtime.serving_published else 0)

    # ---- timeline (TimelineObserver) -------------------------------------------------------

    def event(self, txn: Transaction, event: controller_pb2.TimelineEvent) -> None:
        if event.event_kind == Kind.TIMELINE_EVENT_KIND_EVIDENCE:
            key = (txn.instance_id, tuple(event.ranks), event.evidence_kind, event.observed_at_unix_sec)
            if key in self._seen_evidence:
                return
            self._seen_evidence[key] = None
            while len(self._seen_evidence) > _SEEN_EVIDENCE_MAX:
                self._seen_evidence.popitem(last=False)
            self.evidence.labels(controller_pb2.SoftwareFaultKind.Name(event.evidence_kind)
                                 .removeprefix("SOFTWARE_FAULT_KIND_")).inc()
        elif event.event_kind == Kind.TIMELINE_EVENT_KIND_DECISION:
            if event.name == "reconfigure":
                self.fallbacks.labels(controller_pb2.FallbackCause.Name(event.fallback_cause)
                                      .removeprefix("FALLBACK_CAUSE_")).inc()
            elif event.name == "gate" and not event.gate_allowed:
                for reason in event.gate_reasons:
                    self.gate_rejections.labels(controller_pb2.GateReason.Name(reason).removeprefix("GATE_REASON_")).inc()
        elif event.event_kind == Kind.TIMELINE_EVENT_KIND_CALL and event.name == "canary":
            self.idle_fault_probes.labels("error" if event.error else event.outcome).inc()
        elif event.event_kind == Kind.TIMELINE_EVENT_KIND_NOTE and event.name == "reinference":
            self.reinference.labels(str(txn.instance_id)).inc(event.migrated_requests)

    def finished(self, txn: Transaction) -> None:
        outcome = run_outcome(txn.outcome)
        self.strategy_runs.labels(txn.strategy, outcome).inc()
        if txn.strategy == "capacity_restore" and outcome == "succeeded":
            self.restore_seconds.observe(max(0.0, txn.proto.ended_at_unix_sec - txn.proto.started_at_unix_sec))
        if txn.strategy != "dp_scale_down" or outcome != "succeeded":
            return
        stages = scale_down_stages(txn.proto)
        for stage in stages:
            self.stage_seconds.labels(stage.name).observe(stage.duration_sec)
        total = fault_to_published_sec(txn.proto, stages)
        if total is not None:
            self.fault_to_published.observe(total)

    # ---- intake and publication ------------------------------------------------------------

    def fault_report(self, kind: str) -> None:
        self.fault_reports.labels(kind).inc()

    def refresh(self, event: str, ok: bool) -> None:
        (self.publications if ok else self.publish_failures).labels(event).inc()

    def publisher_call(self, publisher: str, call: str, ok: bool) -> None:
        self.publisher_calls.labels(publisher, call, "ok" if ok else "failed").inc()
        self.publisher_up.labels(publisher).set(1 if ok else 0)

    def publisher_repair(self, publisher: str, action: str, workers: int) -> None:
        self.publisher_repairs.labels(publisher, action).inc(workers)

    def leadership(self, leading: bool, term: int, takeover_sec: float | None = None) -> None:
        was, self._leading = self._leading, leading
        self.leader.set(1 if leading else 0)
        self.leader_term.set(term if leading else 0)
        if takeover_sec is not None:
            self.takeover_seconds.observe(takeover_sec)
            self.leadership_changes.labels("elected").inc()
        elif was and not leading:
            self.leadership_changes.labels("deposed").inc()

    def not_leader(self, kind: str) -> None:
        self.not_leader_refusals.labels(kind).inc()

    def hardware_fault(self, level: str, mapped: bool) -> None:
        self.hardware_faults.labels(level, "true" if mapped else "false").inc()
