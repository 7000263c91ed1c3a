"""Each invariant fires: on a deliberately broken world (the real code over a tampered transport or
engine) or on a hand-made bad state of the world the checker reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from motor.common.term_fence import TermFence
from motor.controller.fault_tolerance.evidence import EvidenceKind, Health, RankEvidence
from motor.controller.model.runtime import FtPhase
from motor.simulation.hardware import Delivered
from motor.simulation.invariants import SafetyChecker, final_checks
from motor.simulation.replicas import ControllerReplicas
from motor.simulation.runner import run
from motor.simulation.schedule import Event
from motor.simulation.world import World

from .test_simulation_pinned import _SURVIVOR_DIES_AFTER_ITS_READ


def _invariants(result) -> set[str]:
    return {v.invariant for v in result.violations}


def test_dead_rank_published_fires_when_the_coordinator_ignores_every_withdrawal() -> None:
    def freeze(world: World) -> None:
        table = world.table
        table.refresh = lambda event, instances, revision: revision  # acknowledges, changes nothing

    result = run(1, events=[Event(10.0, "executor_death", rank=3)], tamper=freeze)
    assert _invariants(result) == {"dead_rank_published"}, result.violations
    assert "rank 3" in result.violations[0].message


def test_evidence_lost_fires_when_a_commit_drops_a_survivors_later_death() -> None:
    def settle_by_the_last_read_only(world: World) -> None:
        intake = world.core.faults.intake
        settle = intake.settle
        # Every report older than the round's last read counts as seen by the round, also a
        # survivor's death reported after its own healthy read.
        intake.settle = lambda iid, committed, observed, whole, last_reads=None: settle(iid, committed, observed, whole)

    result = run(503, events=_SURVIVOR_DIES_AFTER_ITS_READ, tamper=settle_by_the_last_read_only)
    assert _invariants(result) == {"evidence_lost"}, result.violations
    assert "rank 0" in result.violations[0].message and "now holds nothing" in result.violations[0].message


def test_liveness_fires_when_relaunched_engines_never_form_a_group() -> None:
    def never_ready(world: World) -> None:
        world.knobs.load_sec = 10_000.0

    result = run(1, events=[Event(10.0, "nm_crash", pod=0, duration_sec=2.0)], tamper=never_ready)
    assert "liveness" in _invariants(result), result.violations


# A round in flight when its leader loses etcd: the leader is deposed at its lease deadline while
# its calls are still held on the wire, and a standby takes over and resumes the instance.
_DEPOSED_MID_ROUND = [Event(10.0, "executor_death", rank=1), Event(13.0, "leader_partition", duration_sec=10.0)]


def test_the_receivers_fences_refuse_a_deposed_leaders_calls_that_arrive_after_the_new_term() -> None:
    agents: list = []  # the pods' NodeManagers once the instance serves (the world's stop drops them)
    result = run(28, events=_DEPOSED_MID_ROUND, tamper=lambda world: agents.extend(world.pods.values()))
    assert result.violations == [], result.trace
    refused = sum(nm.term_fence.refused for nm in agents)
    assert refused > 0, result.trace


def test_two_leaders_act_fires_when_the_fences_accept_every_term() -> None:
    def open_fences(world: World) -> None:
        for nm in world.pods.values():
            nm.term_fence.refusal = lambda term, method, read=False: None  # type: ignore[union-attr]
        world.coordinator_fence.refusal = lambda term, method, read=False: None  # type: ignore[method-assign]

    result = run(28, events=_DEPOSED_MID_ROUND, tamper=open_fences)
    assert "two_leaders_act" in _invariants(result), result.violations
    assert "after term" in next(v.message for v in result.violations if v.invariant == "two_leaders_act")


def test_a_clean_fault_keeps_every_invariant() -> None:
    result = run(1, events=[Event(10.0, "executor_death", rank=3), Event(30.0, "traffic")])
    assert result.violations == [], result.trace


# -- hand-made states ------------------------------------------------------------------------
@dataclass
class _Engine:
    process_up: bool = True
    ready: bool = True
    status: str = "healthy"


@dataclass
class _Group:
    engines: dict = field(default_factory=lambda: {r: _Engine() for r in range(4)})
    members: set = field(default_factory=lambda: {0, 1, 2, 3})


@dataclass
class _Runtime:
    instance_id: int = 7
    phase: FtPhase = FtPhase.NORMAL
    original_dp_ranks: tuple = (0, 1, 2, 3)
    dead_committed: frozenset = frozenset()
    reconfiguration_gave_up: bool = False
    last_error: str | None = None


@dataclass
class _Hardware:
    delivered: list = field(default_factory=list)


@dataclass
class _Clock:
    now: float = 0.0

    def monotonic(self) -> float:
        return self.now


@dataclass
class _Held:
    phase: str
    dead_committed: tuple


class _Store:
    def __init__(self, world: _World) -> None:
        self.world = world
        self.record: _Held | None = None

    def held(self, instance_id: int):
        """By default what the runtime acts on (a store that took every write)."""
        if self.record is not None:
            return self.record
        return _Held(str(self.world.rt.phase), tuple(self.world.rt.dead_committed))


@dataclass
class _Faults:
    held: dict = field(default_factory=dict)

    def evidence(self, instance_id: int) -> dict:
        return dict(self.held)


@dataclass
class _Core:
    faults: _Faults = field(default_factory=_Faults)


class _World:
    """What the checkers read of a World, set by hand."""

    def __init__(self) -> None:
        from motor.simulation.world import controller_config
        self.config = controller_config()
        self.group = _Group()
        self.rt = _Runtime()
        self.view: frozenset | None = frozenset({0, 1, 2, 3})
        self.core = _Core()
        self.incarnation = 1
        self.relaunches = 0
        self.scale_up_added: dict = {}
        self.scale_up_committed: list = []
        self.max_concurrent_strategies = 0
        self.applies: dict = {}
        self.fence_breaches: list = []
        self.inflight: dict = {}
        self.running = False
        self.store = _Store(self)
        self.pods: dict = {"10.0.0.1:50051": object(), "10.0.0.2:50051": object()}
        self.call_listeners: list = []
        self.hardware = _Hardware()
        self.clock = _Clock()

    def call(self, name: str, *args) -> None:
        for listener in self.call_listeners:
            listener(name, "10.0.0.1:50051", args)

    def published(self):
        return self.view

    def runtime(self):
        return self.rt

    def dead_in_truth(self):
        return {r for r, e in self.group.engines.items() if not e.process_up or e.status == "dead"}

    def healthy_in_truth(self):
        return {r for r, e in self.group.engines.items() if e.process_up and e.status == "healthy"
                and r in self.group.members}

    def strategy_running(self):
        return self.running


def test_dead_rank_published_uses_the_short_bound_once_the_snapshot_is_complete() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.group.engines[3].status = "dead"
    for r in (0, 1, 2):
        w.group.engines[r].status = "unhealthy"
    fired = []
    for step in range(200):
        fired += checker.check(step * 0.5)
    assert [v.invariant for v in fired] == ["dead_rank_published"]
    assert fired[0].at_sec <= checker.complete_bound_sec + 1
    assert "complete snapshot" in fired[0].message


def test_dead_rank_published_counts_again_from_a_new_controller_life() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.group.engines[3].status = "dead"
    restart_at = checker.bound_sec - 10.0
    fired, t = [], 0.0
    while t < restart_at + checker.bound_sec + 5.0:
        if t == restart_at:
            w.incarnation += 1
        fired += checker.check(t)
        t += 0.5
    assert [v.invariant for v in fired] == ["dead_rank_published"]
    assert fired[0].at_sec > restart_at + checker.bound_sec
    assert f"since t={restart_at:.3f}" in fired[0].message


def test_retired_rank_returns_fires_without_a_reconfiguration_and_not_after_one() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.rt.phase, w.rt.dead_committed, w.view = FtPhase.SCALED_DOWN_RUNNING, frozenset({3}), frozenset({0, 1, 2})
    assert checker.check(1.0) == []
    w.view = frozenset({0, 1, 2, 3})
    assert [v.invariant for v in checker.check(2.0)] == ["retired_rank_returns"]
    w.view, w.relaunches = frozenset({0, 1, 2}), 1
    checker.check(3.0)
    w.relaunches = 2  # a reconfiguration relaunched every rank: rank 3 may serve again
    w.view = frozenset({0, 1, 2, 3})
    assert checker.check(4.0) == []


def test_retired_rank_returns_lets_back_exactly_the_ranks_a_committed_scale_up_added() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.rt.phase, w.rt.dead_committed, w.view = FtPhase.SCALED_DOWN_RUNNING, frozenset({2, 3}), frozenset({0, 1})
    assert checker.check(1.0) == []
    # A scale-up of rank 3 applied but never committed lets nothing back.
    w.scale_up_added["su-7-a"] = frozenset({3})
    w.rt.dead_committed = frozenset({2})
    w.view = frozenset({0, 1, 3})
    assert [v.invariant for v in checker.check(2.0)] == ["retired_rank_returns"]
    w.view, w.rt.dead_committed = frozenset({0, 1}), frozenset({2, 3})
    checker.check(3.0)
    # Committed: rank 3 (out of dead_committed) may serve again, rank 2 (not added) may not.
    w.scale_up_committed.append("su-7-a")
    w.rt.dead_committed, w.view = frozenset({2}), frozenset({0, 1, 3})
    assert checker.check(4.0) == []
    w.view = frozenset({0, 1, 2, 3})
    assert [v.invariant for v in checker.check(5.0)] == ["retired_rank_returns"]
    # Retired again by a later round: the old commit does not let it back a second time.
    w.rt.dead_committed, w.view = frozenset({2, 3}), frozenset({0, 1})
    checker.check(6.0)
    w.rt.dead_committed, w.view = frozenset({2}), frozenset({0, 1, 3})
    assert [v.invariant for v in checker.check(7.0)] == ["retired_rank_returns"]


def test_one_strategy_per_instance_fires_on_two_strategies_in_flight() -> None:
    w = _World()
    w.max_concurrent_strategies = 2
    assert [v.invariant for v in SafetyChecker(w).check(1.0)] == ["one_strategy_per_instance"]  # type: ignore[arg-type]


def test_apply_replayed_fires_on_an_apply_sent_by_two_controller_lives() -> None:
    w = _World()
    w.applies = {"sd-7-a": {1}, "sd-7-b": {1, 2}}
    out = SafetyChecker(w).check(1.0)  # type: ignore[arg-type]
    assert [v.invariant for v in out] == ["apply_replayed"] and "sd-7-b" in out[0].message


def test_two_leaders_act_reports_each_breach_a_receiver_saw_once() -> None:
    w = _World()
    w.fence_breaches.append("nodemanager pod=10.0.0.1 accepted status of term 2 (life 1) after term 5")
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    out = checker.check(1.0)
    assert [v.invariant for v in out] == ["two_leaders_act"] and "term 2" in out[0].message
    assert checker.check(2.0) == []


def test_a_receiver_accepting_two_lives_in_one_term_or_an_older_term_is_a_breach() -> None:
    replicas = ControllerReplicas(None, 2)  # type: ignore[arg-type]
    fence = TermFence("nodemanager pod=10.0.0.1")
    replicas.accepted(fence, "guard", 5, life=1)
    replicas.accepted(fence, "status", 5, life=1)
    assert replicas.breaches == []
    replicas.accepted(fence, "apply", 5, life=2)
    replicas.accepted(fence, "finalize", 3, life=3)
    assert len(replicas.breaches) == 2
    assert "life 2 in term 5" in replicas.breaches[0] and "of term 3 (life 3) after term 5" in replicas.breaches[1]


def test_published_equals_alive_fires_when_the_coordinator_routes_to_a_retired_rank() -> None:
    w = _World()
    w.rt.phase, w.rt.dead_committed = FtPhase.SCALED_DOWN_RUNNING, frozenset({3})
    w.group.engines[3].process_up = False
    w.group.members = {0, 1, 2}
    assert [v.invariant for v in final_checks(w, 1.0, 1)] == ["published_equals_alive"]  # type: ignore[arg-type]
    w.view = frozenset({0, 1, 2})
    assert final_checks(w, 1.0, 1) == []  # type: ignore[arg-type]


def test_liveness_fires_while_a_strategy_still_runs_or_the_phase_is_not_final() -> None:
    w = _World()
    w.running = True
    assert [v.invariant for v in final_checks(w, 1.0, 1)] == ["liveness"]  # type: ignore[arg-type]
    w.running, w.rt.phase = False, FtPhase.RECONFIGURING
    assert [v.invariant for v in final_checks(w, 1.0, 1)] == ["liveness"]  # type: ignore[arg-type]
    # An explicit gave-up state, waiting for a NodeManager that is down to register again, ends the fault.
    w.rt.reconfiguration_gave_up, w.pods["10.0.0.2:50051"] = True, None
    assert final_checks(w, 1.0, 1) == []  # type: ignore[arg-type]


def test_reconfigurations_bounded_fires_on_more_reconfigurations_than_faults_allow() -> None:
    w = _World()
    attempts = w.config.reconfiguration_max_attempts
    w.inflight = {f"reconf-7-{i}": 0 for i in range(attempts)}
    assert final_checks(w, 1.0, 1) == []  # type: ignore[arg-type]
    w.inflight[f"reconf-7-{attempts}"] = 0
    assert [v.invariant for v in final_checks(w, 1.0, 1)] == ["reconfigurations_bounded"]  # type: ignore[arg-type]


def test_liveness_fires_when_the_reconfiguration_gave_up_while_every_nodemanager_runs() -> None:
    w = _World()
    w.rt.phase, w.rt.reconfiguration_gave_up, w.view = FtPhase.RECONFIGURING, True, frozenset()
    w.store.record = _Held(str(FtPhase.RECONFIGURING), ())
    assert [v.invariant for v in final_checks(w, 1.0, 1)] == ["liveness"]  # type: ignore[arg-type]
    w.pods["10.0.0.2:50051"] = None  # its NodeManager is down: waiting for it to register is the design
    assert final_checks(w, 1.0, 1) == []  # type: ignore[arg-type]


def test_store_holds_acted_state_fires_when_the_store_kept_an_older_phase() -> None:
    w = _World()
    w.rt.phase, w.rt.dead_committed, w.view = FtPhase.SCALED_DOWN_RUNNING, frozenset({3}), frozenset({0, 1, 2})
    w.group.engines[3].process_up = False
    w.group.members = {0, 1, 2}
    assert final_checks(w, 1.0, 1) == []  # type: ignore[arg-type]
    w.store.record = _Held("POST_SCALE_CLEANUP", (3,))
    out = final_checks(w, 1.0, 1)  # type: ignore[arg-type]
    assert [v.invariant for v in out] == ["store_holds_acted_state"] and "POST_SCALE_CLEANUP" in out[0].message


def test_scale_down_against_hardware_fires_when_a_round_keeps_a_rank_reported_lost_before_its_apply() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.hardware.delivered.append(Delivered(4.0, 4.0, 1, frozenset({2}), True, False, False))
    w.clock.now = 5.0
    w.call("apply", 7, "sd-7-a", [3])
    w.clock.now = 8.0
    w.call("finalize", 7, "sd-7-a", True, [3])
    fired = checker.check(8.0)
    assert [v.invariant for v in fired] == ["scale_down_against_hardware"]
    assert "kept ranks [2]" in fired[0].message


def test_scale_down_against_hardware_lets_a_round_remove_the_reported_rank_or_follow_a_relaunch() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.hardware.delivered.append(Delivered(4.0, 4.0, 1, frozenset({3}), True, False, False))
    w.hardware.delivered.append(Delivered(4.5, 1.0, 1, frozenset(), True, True, False))
    w.clock.now = 2.0
    w.call("start_engines", 7, "reconf-7-a")
    w.clock.now = 5.0
    w.call("apply", 7, "sd-7-a", [3])
    w.clock.now = 8.0
    w.call("finalize", 7, "sd-7-a", True, [3])
    assert checker.check(8.0) == []


def test_dead_rank_published_uses_the_short_bound_after_a_hardware_report_at_rest() -> None:
    w = _World()
    checker = SafetyChecker(w)  # type: ignore[arg-type]
    w.hardware.delivered.append(Delivered(1.0, 1.0, 1, frozenset({3}), True, False, True))
    w.group.engines[3].status = "dead"
    fired = []
    for step in range(200):
        fired += checker.check(step * 0.5)
    assert [v.invariant for v in fired] == ["dead_rank_published"]
    assert fired[0].at_sec <= 1.0 + checker.complete_bound_sec + 1  # counted from the report
    assert "hardware report" in fired[0].message


def _dead_evidence(rank: int, received_sec: float) -> RankEvidence:
    return RankEvidence(rank, Health.DEAD, EvidenceKind.ENGINE_DEAD, "", observed_at_sec=1e9 + received_sec,
                        received_mono_sec=received_sec)


def test_evidence_lost_fires_when_held_dead_evidence_goes_while_the_engine_stays_dead() -> None:
    w = _World()
    checker = SafetyChecker(w)
    w.group.engines[1].status = "dead"
    w.clock.now = 1.0
    assert checker.check(1.0) == []
    w.core.faults.held[1] = _dead_evidence(1, 1.2)
    assert checker.check(1.5) == []
    w.core.faults.held.clear()
    found = [v for v in checker.check(2.0) if v.invariant == "evidence_lost"]
    assert len(found) == 1 and "rank 1" in found[0].message and "now holds nothing" in found[0].message
    assert checker.check(2.5) == [], "each loss is reported once"


def test_evidence_lost_lets_evidence_go_once_the_rank_is_committed_relaunched_or_a_new_life_starts() -> None:
    for act in ("commit", "relaunch", "new_life"):
        w = _World()
        checker = SafetyChecker(w)
        w.group.engines[1].status = "dead"
        assert checker.check(1.0) == []
        w.core.faults.held[1] = _dead_evidence(1, 1.2)
        assert checker.check(1.5) == []
        w.core.faults.held.clear()
        if act == "commit":
            w.rt.dead_committed = frozenset({1})
        elif act == "relaunch":
            w.group.engines[1] = _Engine(status="dead")  # a new engine, itself not up yet
        else:
            w.incarnation = 2
        assert [v for v in checker.check(2.0) if v.invariant == "evidence_lost"] == [], act
