"""The properties every schedule must keep, checked after every step, each with a name.

Safety (every step): a rank dead in truth is not published as serving longer than one decision
(`dead_rank_published`); a committed (retired) rank does not come back into the serving view
without a reconfiguration, or an elastic scale-up that added it, was committed on the NodeManagers
and left it out of the Controller's dead_committed (`retired_rank_returns`); at most one strategy of the instance has calls
in flight (`one_strategy_per_instance`); no apply request_id is sent by two Controller lives, a life being
one replica process in one term (`apply_replayed`); no receiver (a NodeManager, the Coordinator)
accepts calls of two lives in one term, or a call of an older term after a newer one
(`two_leaders_act`); once the acting Controller holds DEAD evidence of a rank's death, it holds
it until it acts on it (commits the rank dead, or its engine is relaunched), as no newer
observation of a dead engine can say otherwise (`evidence_lost`); a round does not commit a scale-down against a hardware report it had before
its apply: an unmappable fault, or a severe fault on a rank it keeps (`scale_down_against_hardware`,
RFC §4.2/§8); fast recovery (RFC §4.3) sends `retry` only when it is on (`fast_recovery_gated`),
commits no removal (`retry_removes_nothing`), is followed after a failure by a relaunch before any
scale-down (`fast_recovery_escalates_to_reconfiguration`) and starts at most max_attempts times per
attempt_window_sec in one Controller life (`fast_recovery_bounded`). At the end, once stable: the Coordinator routes to exactly the Controller's
alive set, which is what is healthy in truth (`published_equals_alive`); the instance ended in
SCALED_DOWN_RUNNING, NORMAL after a reconfiguration, or gave up (`liveness`); the store holds the
state acted on, so a restart now would not undo it (`store_holds_acted_state`); reconfigurations
per fault are bounded by the configured attempts (`reconfigurations_bounded`), and a reconfiguration
gives up only while a NodeManager is down (`liveness`). Bounds derive from the Controller's config.
"""

from __future__ import annotations

from dataclasses import dataclass

from motor.controller.config import ControllerConfig
from motor.controller.fault_tolerance.evidence import Health, RankEvidence
from motor.controller.model.runtime import FtPhase

from gen.motor.v1 import node_manager_pb2
from motor.simulation.world import INSTANCE_ID, World

_RETRY = node_manager_pb2.INSTRUCTION_RETRY

INVARIANTS = ("dead_rank_published", "evidence_lost", "retired_rank_returns", "one_strategy_per_instance",
              "apply_replayed",
              "two_leaders_act", "scale_down_against_hardware", "published_equals_alive", "store_holds_acted_state",
              "liveness", "reconfigurations_bounded",
              "fast_recovery_gated", "retry_removes_nothing", "fast_recovery_escalates_to_reconfiguration",
              "fast_recovery_bounded",
              "world_error")


@dataclass(frozen=True)
class Violation:
    invariant: str
    at_sec: float
    message: str


def decision_bound_sec(config: ControllerConfig, complete: bool) -> float:
    """How long a dead rank may stay published: detection (a poll, or a lost pod's heartbeat
    timeout), the decision's wait, a drain (one call, its deadline twice for a retry). The decision
    waits the hardware window once the snapshot is complete (every active rank dead or unhealthy),
    else up to the whole software collection timeout (RFC §4.4). A severe hardware report on the
    rank that came first, while the instance was at rest, gets the window too (RFC §4.4: a
    matching snapshot within it decides, else the instance is reconfigured at its end)."""
    ft = config.fault_tolerance_config
    detect = max(ft.engine_status_poll_interval_sec, config.heartbeat_timeout_sec)
    wait = ft.hardware_ft_correlation_window_sec if complete else ft.software_status_collection_timeout_sec
    return detect + wait + 2 * ft.dp_scale_down_config.request_timeout_sec + config.heartbeat_interval_sec


def settle_bound_sec(config: ControllerConfig) -> float:
    """How long after the last fault the instance may take to end in a final state: the full
    collection timeout, a round (its execution deadline), a reconfiguration (its whole deadline: a
    rank that dies while the group relaunches leaves the others waiting for it that long), a
    retry's stop and start."""
    ft = config.fault_tolerance_config
    sd = ft.dp_scale_down_config
    return (ft.software_status_collection_timeout_sec + sd.execution_deadline_sec + config.reconfiguration_timeout_sec
            + 6 * sd.request_timeout_sec + 2 * config.heartbeat_timeout_sec + 60.0)


class SafetyChecker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.bound_sec = decision_bound_sec(world.config, complete=False)
        self.complete_bound_sec = decision_bound_sec(world.config, complete=True)
        self._dead_published_since: dict[int, float] = {}
        self._complete_since: float | None = None
        self._retired: set[int] = set()
        self._relaunches_seen = 0
        # When each retired rank was retired: how many scale-up commits had been seen then.
        self._retired_at: dict[int, int] = {}
        self._incarnation_seen = world.incarnation
        # Rounds seen on the calls: request_id → (first apply sent at, ranks removed); relaunch times.
        self._applied: dict[str, tuple[float, frozenset[int]]] = {}
        self._relaunched_at: list[float] = []
        self._found: list[Violation] = []
        # evidence_lost: per rank, its dead engine (the object: a relaunch makes a new one) and the
        # check before the one that first saw it dead (the death happened after that); the DEAD
        # evidence the acting Controller held of that death, and the life that held it.
        self._death: dict[int, tuple[object, float]] = {}
        self._known_dead: dict[int, RankEvidence] = {}
        self._known_life = world.incarnation
        self._last_check_sec = 0.0
        # Fast recoveries: when each one's first guard went out and from which Controller life; when
        # the last one was aborted (cleared by a relaunch).
        self._retries: dict[str, tuple[float, int]] = {}
        self._retry_aborted: tuple[str, float] | None = None
        world.call_listeners.append(self._on_call)

    def _on_call(self, name: str, address: str, args: tuple) -> None:
        now = self.world.clock.monotonic()
        if name == "apply":
            self._applied.setdefault(args[1], (now, frozenset(args[2])))
            self._found += self._check_apply(args, now)
        elif name == "guard" and args[1].startswith("fr-") and args[1] not in self._retries:
            self._retries[args[1]] = (now, self.world.incarnation)
            self._found += self._retries_bounded(now)
        elif name == "start_engines":
            self._relaunched_at.append(now)
            self._retry_aborted = None
        elif name == "finalize" and args[1].startswith("fr-"):
            if args[2] and list(args[3]):
                self._found.append(Violation("retry_removes_nothing", now, f"fast recovery {args[1]} commits "
                                                                           f"retired ranks {list(args[3])}"))
            if not args[2]:
                self._retry_aborted = (args[1], now)
        elif name == "finalize" and args[2] and args[1] in self._applied:
            self._found += self._commit_against_hardware(args[1], now)

    def _check_apply(self, args: tuple, now: float) -> list[Violation]:
        """RFC §4.3: a retry only with fast recovery on; after a failed one the whole instance is
        reconfigured, never scaled down first."""
        retry = len(args) > 7 and args[7] == _RETRY
        if retry and not self.world.config.fault_tolerance_config.enable_fast_recovery:
            return [Violation("fast_recovery_gated", now, f"retry {args[1]} sent with fast recovery off")]
        if not retry and self._retry_aborted is not None:
            rid, at = self._retry_aborted
            return [Violation("fast_recovery_escalates_to_reconfiguration", now,
                              f"scale-down {args[1]} applied after fast recovery {rid} failed at t={at:.3f} "
                              f"with no relaunch in between")]
        return []

    def _retries_bounded(self, now: float) -> list[Violation]:
        cfg = self.world.config.fault_tolerance_config.fast_recovery_config
        life = self.world.incarnation
        recent = sorted(rid for rid, (at, lf) in self._retries.items()
                        if lf == life and now - at < cfg.attempt_window_sec)
        if len(recent) > cfg.max_attempts:
            return [Violation("fast_recovery_bounded", now, f"{len(recent)} fast recoveries {recent} within "
                                                            f"{cfg.attempt_window_sec:g}s (max_attempts "
                                                            f"{cfg.max_attempts})")]
        return []

    def _commit_against_hardware(self, request_id: str, now: float) -> list[Violation]:
        """RFC §4.2/§4.4/§8: a round does not commit a scale-down when, before its apply, the same
        Controller life received an unmappable fault on the instance's nodes, or a severe fault on
        a card of a rank it keeps (a relaunch after the fault happened handles it)."""
        w, rt = self.world, self.world.runtime()
        if rt is None:
            return []
        applied_at, removed = self._applied[request_id]
        kept = {r for r in rt.original_dp_ranks if r not in rt.dead_committed and r not in removed}
        out = []
        for d in w.hardware.delivered:
            if not d.severe or d.incarnation != w.incarnation or d.at_sec >= applied_at:
                continue
            if any(d.fault_at_sec <= t <= applied_at for t in self._relaunched_at):
                continue
            if d.unmappable or d.ranks & kept:
                what = "an unmappable fault" if d.unmappable else f"a fault on kept ranks {sorted(d.ranks & kept)}"
                out.append(Violation("scale_down_against_hardware", now,
                                     f"round {request_id} (applied at t={applied_at:.3f}, removing {sorted(removed)}) "
                                     f"commits although {what} was reported at t={d.at_sec:.3f}"))
        return out

    def _reported_at_rest(self, rank: int) -> float | None:
        """When this Controller life took a severe report on the rank's card while at rest."""
        w = self.world
        times = [d.at_sec for d in w.hardware.delivered
                 if d.severe and d.quiet and rank in d.ranks and d.incarnation == w.incarnation
                 and not any(t >= d.fault_at_sec for t in self._relaunched_at)]
        return min(times) if times else None

    def _evidence_lost(self, now: float) -> list[Violation]:
        """Evidence is superseded only by a newer observation of the same rank, and a dead engine
        stays dead until it is relaunched: so DEAD evidence of a death the Controller still has to
        act on (the rank is not committed dead, its engine is the same) is never dropped or
        replaced. A new Controller life starts with none (evidence is in-process, RFC §5)."""
        w, core, rt, out = self.world, self.world.core, self.world.runtime(), []
        since_sec, self._last_check_sec = self._last_check_sec, now
        if core is None or rt is None or w.incarnation != self._known_life:
            self._known_dead.clear()
            self._known_life = w.incarnation
            return out
        held = core.faults.evidence(INSTANCE_ID)
        for rank, engine in sorted(w.group.engines.items()):
            if engine.process_up and engine.status != "dead" or rank in rt.dead_committed:
                self._death.pop(rank, None)
                self._known_dead.pop(rank, None)
                continue
            death = self._death.get(rank)
            if death is None or death[0] is not engine:
                death = self._death[rank] = (engine, since_sec)
                self._known_dead.pop(rank, None)
            ev, known = held.get(rank), self._known_dead.get(rank)
            if ev is not None and ev.health is Health.DEAD and ev.received_mono_sec >= death[1]:
                self._known_dead[rank] = ev
            elif known is not None:
                now_held = "nothing" if ev is None else f"{ev.kind} observed at {ev.observed_at_sec:.3f}"
                out.append(Violation("evidence_lost", now,
                                     f"rank {rank} is dead (its engine not relaunched, not committed dead); the "
                                     f"Controller held its {known.kind} observed at {known.observed_at_sec:.3f} "
                                     f"(received t={known.received_mono_sec:.3f}) and now holds {now_held}"))
                del self._known_dead[rank]
        return out

    def _snapshot_complete(self) -> bool:
        """Every active rank is dead or unhealthy in truth: the evidence for a decision exists."""
        w, rt = self.world, self.world.runtime()
        if rt is None:
            return False
        dead = w.dead_in_truth()
        active = [r for r in rt.original_dp_ranks if r not in rt.dead_committed]
        return bool(dead & set(active)) and all(r in dead or w.group.engines[r].status == "unhealthy" for r in active)

    def check(self, now: float) -> list[Violation]:
        w, out = self.world, []
        published = w.published() or frozenset()
        if self._snapshot_complete():
            self._complete_since = now if self._complete_since is None else self._complete_since
        else:
            self._complete_since = None
        # dead_rank_published: counted only while a Controller runs (a down one decides nothing).
        # A new Controller life starts the count again: the store keeps only the phase, the
        # generation and the committed ranks (RFC §8), so the evidence and the collection window of
        # the life that ended are gone by design and the new one gets a whole decision.
        if w.incarnation != self._incarnation_seen and w.core is not None:
            self._incarnation_seen = w.incarnation
            self._dead_published_since = {r: max(t, now) for r, t in self._dead_published_since.items()}
        dead = w.dead_in_truth()
        out += self._evidence_lost(now)
        out += self._found
        self._found = []
        for rank in sorted(w.group.engines):
            if rank in dead and rank in published and w.core is not None:
                since = self._dead_published_since.setdefault(rank, now)
                complete_for = 0.0 if self._complete_since is None else now - max(since, self._complete_since)
                rt = w.runtime()
                if rt is not None and rank in rt.dead_committed:
                    complete_for = now - since  # the Controller decided it dead: nothing is left to wait for
                reported = self._reported_at_rest(rank)
                if reported is not None:
                    # RFC §4.4: hardware first, the instance at rest: within the correlation window a
                    # matching snapshot decides, or the instance is reconfigured at its end.
                    complete_for = max(complete_for, now - max(since, reported))
                if now - since > self.bound_sec or complete_for > self.complete_bound_sec:
                    bound = self.bound_sec if now - since > self.bound_sec else self.complete_bound_sec
                    what = "" if bound == self.bound_sec else " with a complete snapshot or a hardware report"
                    out.append(Violation("dead_rank_published", now,
                                         f"rank {rank} dead since t={since:.3f} is still published as serving "
                                         f"after {now - since:.1f}s{what} (bound {bound:g}s)"))
                    self._dead_published_since[rank] = float("inf")
            elif rank not in dead or rank not in published:
                self._dead_published_since.pop(rank, None)
        # retired_rank_returns
        if w.relaunches != self._relaunches_seen:
            self._relaunches_seen = w.relaunches
            self._retired.clear()
        rt = w.runtime()
        if rt is not None and rt.phase is FtPhase.SCALED_DOWN_RUNNING:
            for r in rt.dead_committed - self._retired:
                if r not in published:
                    self._retired.add(r)
                    self._retired_at[r] = len(w.scale_up_committed)
        if rt is not None:
            # Re-admitted by a scale-up committed since the rank was retired: exactly the ranks its
            # apply added, once the Controller no longer holds them committed dead.
            for r in sorted(self._retired - rt.dead_committed):
                if any(r in w.scale_up_added[rid] for rid in w.scale_up_committed[self._retired_at.get(r, 0):]):
                    self._retired.discard(r)
        back = sorted(self._retired & published)
        if back:
            out.append(Violation("retired_rank_returns", now,
                                 f"retired ranks {back} are published again without a reconfiguration or a "
                                 "committed scale-up that added them"))
            self._retired -= set(back)
        # one_strategy_per_instance
        if w.max_concurrent_strategies > 1:
            out.append(Violation("one_strategy_per_instance", now,
                                 f"{w.max_concurrent_strategies} strategies had calls in flight at once"))
            w.max_concurrent_strategies = 1
        # apply_replayed: a life is one replica process in one term (a restart, or another replica
        # taking over, is a new one).
        for request_id, lives in sorted(w.applies.items()):
            if len(lives) > 1:
                out.append(Violation("apply_replayed", now,
                                     f"apply {request_id} sent by Controller lives {sorted(lives)}"))
                w.applies[request_id] = {max(lives)}
        # two_leaders_act: what the receivers (NodeManagers, the Coordinator) accepted.
        breaches = w.fence_breaches
        for breach in breaches:
            out.append(Violation("two_leaders_act", now, breach))
        del breaches[:]
        return out


def stable(world: World) -> bool:
    """Nothing left to do: no strategy runs, the phase is final and the Controller's alive set is
    what is healthy in truth (or the instance gave up)."""
    rt = world.runtime()
    if rt is None or world.strategy_running():
        return False
    if rt.reconfiguration_gave_up:
        return True
    alive = {r for r in rt.original_dp_ranks if r not in rt.dead_committed}
    return rt.phase in (FtPhase.NORMAL, FtPhase.SCALED_DOWN_RUNNING) and alive == world.healthy_in_truth()


def final_checks(world: World, now: float, faults: int) -> list[Violation]:
    out = []
    rt = world.runtime()
    if rt is None or not stable(world):
        phase = None if rt is None else rt.phase
        out.append(Violation("liveness", now, f"the instance did not end in SCALED_DOWN_RUNNING, NORMAL or gave "
                                              f"up within {settle_bound_sec(world.config):g}s of the last fault: "
                                              f"phase={phase} strategy_running={world.strategy_running()} "
                                              f"last_error={None if rt is None else rt.last_error!r}"))
        return out
    if rt.reconfiguration_gave_up and all(nm is not None for nm in world.pods.values()):
        # Every fault of the simulation ends; a pod that comes back registers again and resumes the
        # retries. Given up with every NodeManager running: the attempts did not converge.
        out.append(Violation("liveness", now, f"the reconfiguration gave up although every NodeManager runs: "
                                              f"last_error={rt.last_error!r}"))
    if not rt.reconfiguration_gave_up:
        alive = frozenset(r for r in rt.original_dp_ranks if r not in rt.dead_committed)
        published = world.published() or frozenset()
        healthy = frozenset(world.healthy_in_truth())
        if not (published == alive == healthy):
            out.append(Violation("published_equals_alive", now,
                                 f"the Coordinator routes to {sorted(published)}, the Controller's alive set is "
                                 f"{sorted(alive)}, healthy in truth {sorted(healthy)} (phase {rt.phase})"))
    held = world.store.held(rt.instance_id)
    if held is None or held.phase != str(rt.phase) or set(held.dead_committed) != set(rt.dead_committed):
        what = "nothing" if held is None else f"phase {held.phase} dead_committed {sorted(held.dead_committed)}"
        out.append(Violation("store_holds_acted_state", now,
                             f"the store holds {what} while the Controller acts on phase {rt.phase} "
                             f"dead_committed {sorted(rt.dead_committed)}: a restart would restore the older state"))
    reconfigurations = len({rid for rid in world.inflight if rid.startswith("reconf")})
    # Each fault may set off one reconfiguration: its first attempt and the retries, at most
    # reconfiguration_max_attempts in all (then it waits for a pod to register again).
    bound = faults * world.config.reconfiguration_max_attempts
    if reconfigurations > bound:
        out.append(Violation("reconfigurations_bounded", now,
                             f"{reconfigurations} reconfigurations for {faults} faults (bound {bound})"))
    return out
