"""One schedule run on a fresh virtual-time loop, and shrinking a failing schedule.

A run: start the world, wait for the instance to serve, then step `steps` times (`STEP_SEC` of
virtual time each), checking the safety invariants after every step, while each of the schedule's
events fires at its exact virtual time (its own task: at_sec after the start, or after its anchor
first happens); then let the world settle (bounded by the config) and check the final ones.
The world's randomness is seeded from the seed alone, separately from the schedule, so a shrunk
schedule keeps the rest of the world as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from motor.simulation.invariants import SafetyChecker, Violation, final_checks, settle_bound_sec, stable
from motor.simulation.schedule import ANCHORS, Event, generate, generate_focused, scale_up_events, survivor_card_events
from motor.simulation.network import NetworkBounds
from motor.simulation.virtual_time import VirtualTimeLoop
from motor.simulation.world import INSTANCE_ID, PODS, World

STEP_SEC = 0.5
# Every event ends within this of the last step (the longest is a report owed to a Controller).
EVENTS_BOUND_SEC = 600.0
# How often the anchor watcher reads the FT phase (virtual seconds).
ANCHOR_POLL_SEC = 0.1
STARTUP_BOUND_SEC = 60.0
# Stable this long (no strategy, a final phase) before the final checks: publications converge.
QUIET_SEC = 25.0
LOSSY = NetworkBounds(delay_max_sec=0.5, loss=0.15, duplicate=0.2)


@dataclass
class RunResult:
    seed: int
    dialect: str
    events: list[Event]
    trace: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    scale_up: bool = False

    @property
    def failed(self) -> bool:
        return bool(self.violations)


# Every FOCUSED_EVERY-th seed is a round-focused schedule (faults inside a round's short phases).
FOCUSED_EVERY = 3


def schedule_for(seed: int, steps: int, scale_up: bool = False) -> list[Event]:
    """`scale_up`: a restoration after the first scale-down, and faults around its scale-up round."""
    ranks = [r for pod in PODS for r in pod]
    focused = seed % FOCUSED_EVERY == FOCUSED_EVERY - 1
    make = generate_focused if focused else generate
    events = make(random.Random(f"schedule-{seed}"), steps, STEP_SEC, ranks, len(PODS))
    if focused:
        events += survivor_card_events(random.Random(f"survivor-card-{seed}"), ranks)
    if scale_up:
        events += scale_up_events(random.Random(f"scale-up-{seed}"), ranks, len(PODS))
    return events


def run(seed: int, dialect: str = "vllm", steps: int = 120, events: list[Event] | None = None,
        tamper: Callable[[World], None] | None = None, fast_recovery: bool | None = None,
        scale_up: bool = False) -> RunResult:
    """`tamper`: breaks the world once it serves (tests show that an invariant catches it);
    `fast_recovery`: the Controller's enable_fast_recovery (None: decided by the seed, half on);
    `scale_up`: the pods declare supports_scale_up (a restoration is then an elastic scale-up), and
    a generated schedule gets `scale_up_events`."""
    events = schedule_for(seed, steps, scale_up) if events is None else events
    result = RunResult(seed, dialect, list(events))
    result.scale_up = scale_up
    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(_run(result, loop, steps, tamper, fast_recovery))
    finally:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(_drain(left))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return result


async def _drain(tasks) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


async def _fire(world: World, event: Event) -> None:
    g = world.group
    if event.kind == "kill_process":
        world.kill_process(event.rank)
    elif event.kind == "executor_death":
        world.executor_death(event.rank)
    elif event.kind == "unhealthy":
        world.unhealthy(event.rank)
    elif event.kind == "fail_vote":
        world.knobs.fail_next_vote = True
    elif event.kind == "slow_rebuild":
        world.knobs.rebuild_sec = event.duration_sec
    elif event.kind == "uneven_recovery":
        world.knobs.recovery_skew_sec = event.duration_sec
    elif event.kind == "hang_status":
        g.hung.add(event.rank)
        await asyncio.sleep(event.duration_sec)
        g.hung.discard(event.rank)
    elif event.kind == "nm_crash":
        address = world.pod_addresses[event.pod]
        await world.nm_crash(address)
        await asyncio.sleep(event.duration_sec)
        world.nm_restart(address)
    elif event.kind == "controller_restart":
        await world.controller_restart(event.duration_sec)
    elif event.kind == "leader_crash":
        await world.leader_crash(event.duration_sec)
    elif event.kind == "leader_partition":
        await world.leader_partition(event.duration_sec)
    elif event.kind == "replica_restart":
        await world.replica_restart(event.duration_sec)
    elif event.kind == "store_outage":
        world.store.failing = True
        await asyncio.sleep(event.duration_sec)
        world.store.failing = False
    elif event.kind == "traffic":
        g.traffic()
    elif event.kind == "coordinator_restart":
        world.coordinator_restart()
    elif event.kind == "restore":
        world.restore()
    elif event.kind == "hardware_fault":
        await world.hardware.fire(event)
    elif event.kind == "lossy_network":
        # Windows may overlap: the network calms down when the last one ends, back to the bounds it
        # had before the first (a window ending inside another must not restore LOSSY for good).
        if world.lossy_windows == 0:
            world.calm_bounds = world.net.bounds
        world.lossy_windows += 1
        world.net.bounds = LOSSY
        try:
            await asyncio.sleep(event.duration_sec)
        finally:
            world.lossy_windows -= 1
            if world.lossy_windows == 0:
                world.net.bounds = world.calm_bounds
    else:
        raise ValueError(f"unknown event kind {event.kind!r}")


async def _run(result: RunResult, loop: VirtualTimeLoop, steps: int, tamper, fast_recovery: bool | None) -> None:
    # From a stream of its own, so that turning fast recovery on for half the seeds leaves every
    # other draw of the world (and so every pinned schedule's world) as it was.
    if fast_recovery is None:
        fast_recovery = random.Random(f"fast-recovery-{result.seed}").random() < 0.5
    world = World(random.Random(f"world-{result.seed}"), result.dialect, loop, NetworkBounds(), result.trace,
                  ids=random.Random(f"uuid-{result.seed}"), jitter=random.Random(f"jitter-{result.seed}"),
                  fast_recovery=fast_recovery, scale_up=result.scale_up)
    try:
        await _drive(world, result, loop, steps, tamper)
    except Exception as exc:  # noqa: BLE001 - a crash of the world or the code under test is a finding
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.violations.append(Violation("world_error", loop.time(), f"{type(exc).__name__}: {exc} "
                                                                       f"({where.filename}:{where.lineno})"))
    finally:
        await world.stop()


async def _drive(world: World, result: RunResult, loop: VirtualTimeLoop, steps: int, tamper) -> None:
    await world.start()
    while not (stable(world) and world.published()):
        if loop.time() > STARTUP_BOUND_SEC:
            result.violations.append(Violation("liveness", loop.time(), "the instance never served at start-up"))
            return
        await asyncio.sleep(STEP_SEC)
    if tamper is not None:
        tamper(world)
    t0 = loop.time()
    ft = world.config.fault_tolerance_config
    world.note(f"serving {sorted(world.published() or ())}; schedule starts (fast recovery "
               f"{'on' if ft.enable_fast_recovery else 'off'}, idle fault probe {'on' if ft.idle_fault_probe else 'off'}"
               f"{', scale-up on' if world.scale_up else ''})")
    checker = SafetyChecker(world)
    anchors = Anchors(world)
    fired: list[Event] = []
    tasks = {loop.create_task(_scheduled(world, result, event, t0, anchors, fired)): event for event in result.events}
    watcher = loop.create_task(anchors.watch({e.after for e in result.events if e.after}))
    last = _observed(world)
    end = t0 + steps * STEP_SEC
    deadline = None
    while True:
        await asyncio.sleep(STEP_SEC)
        last = _note_changes(world, last)
        result.violations += checker.check(loop.time())
        if result.violations:
            break
        if loop.time() < end:
            continue
        if not anchors.closed:
            # The run is over for anchors: an event whose anchor has not happened never fires.
            anchors.closed = True
            watcher.cancel()
            for task, event in tasks.items():
                if event.after and event.after not in anchors.seen_at:
                    task.cancel()
        if not all(t.done() for t in tasks):
            if loop.time() >= end + EVENTS_BOUND_SEC:
                result.violations.append(Violation("world_error", loop.time(), "an event of the schedule never ended"))
                break
            continue
        if deadline is None:
            deadline = loop.time() + settle_bound_sec(world.config)
            quiet_since = None
        quiet_since = (quiet_since or loop.time()) if stable(world) else None
        if quiet_since is not None and loop.time() - quiet_since >= QUIET_SEC or loop.time() >= deadline:
            break
    for task in [*tasks, watcher]:
        task.cancel()
    await asyncio.gather(*tasks, watcher, return_exceptions=True)
    if not result.violations:
        result.violations += final_checks(world, loop.time(), len(fired))
    world.note(f"end: phase={world.phase()} published={sorted(world.published() or ())} "
               f"healthy={sorted(world.healthy_in_truth())}")


class Anchors:
    """When each anchor first happened since the schedule started: an FT phase, the first evidence
    and the first survivor recovered after an apply (seen by a watcher every `ANCHOR_POLL_SEC`), or
    the first guard, apply and snapshot pull a NodeManager receives (seen on the call)."""

    def __init__(self, world: World) -> None:
        self._world = world
        # FAST_RECOVERING and SCALING_UP too: pinned schedules land faults inside a fast recovery,
        # `scale_up_events` inside a scale-up (the generator's anchors stay as they are).
        self._happened = {name: asyncio.Event() for name in (*ANCHORS, "FAST_RECOVERING", "SCALING_UP")}
        self.seen_at: dict[str, float] = {}
        self.rank_of: dict[str, int] = {}
        self._applied: set[str] = set()
        # Set at the end of the steps: anchors that happen later fire nothing.
        self.closed = False
        world.call_listeners.append(self._on_call)

    def _on_call(self, name: str, address: str, args: tuple) -> None:
        if name == "apply":
            self._applied.add(args[1])
            self._hit("apply")
        elif name == "guard":
            self._hit("guard")
        elif name == "status" and args[1] == "":  # the snapshot puller asks with no request id
            self._hit("pull")

    def _hit(self, name: str, rank: int = -1) -> None:
        if name not in self.seen_at and not self.closed:
            self.seen_at[name] = self._world.clock.monotonic()
            if rank >= 0:
                self.rank_of[name] = rank
            self._happened[name].set()

    def _recovered(self) -> int:
        """The lowest survivor healthy again after an apply the schedule saw (-1: none yet)."""
        if not self._applied:
            return -1
        return min((r for r, e in self._world.group.engines.items()
                    if e.applied in self._applied and e.process_up and e.status == "healthy"), default=-1)

    async def watch(self, wanted: set[str]) -> None:
        polled = wanted - {"apply", "guard", "pull"}
        while polled - set(self.seen_at):
            phase = self._world.phase()
            if phase is not None and str(phase) in self._happened:
                self._hit(str(phase))
            core = self._world.core
            if "evidence" in polled and core is not None and core.faults.evidence(INSTANCE_ID):
                self._hit("evidence")
            if "recovered" in polled and (rank := self._recovered()) >= 0:
                self._hit("recovered", rank)
            await asyncio.sleep(ANCHOR_POLL_SEC)

    async def wait(self, name: str) -> float:
        await self._happened[name].wait()
        return self.seen_at[name]


async def _scheduled(world: World, result: RunResult, event: Event, t0: float, anchors: Anchors,
                     fired: list[Event]) -> None:
    """One event at its exact virtual time (its anchor's time, or the schedule's start, plus at_sec)."""
    start = await anchors.wait(event.after) if event.after else t0
    if event.anchor_rank:
        event = dataclasses.replace(event, rank=anchors.rank_of[event.after], anchor_rank=False)
    await asyncio.sleep(max(0.0, start + event.at_sec - world.clock.monotonic()))
    fired.append(event)
    world.note(f"event {event.describe()}")
    try:
        await _fire(world, event)
    except Exception as exc:  # noqa: BLE001 - a crash of the world or the code under test is a finding
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.violations.append(Violation("world_error", world.clock.monotonic(),
                                           f"{event.describe()}: {type(exc).__name__}: {exc} "
                                           f"({where.filename}:{where.lineno})"))


def _observed(world: World) -> tuple:
    rt = world.runtime()
    return (None if rt is None else str(rt.phase), () if rt is None else tuple(sorted(rt.dead_committed)),
            tuple(sorted(world.published() or ())))


def _note_changes(world: World, last: tuple) -> tuple:
    now = _observed(world)
    if now != last:
        world.note(f"phase={now[0]} dead_committed={list(now[1])} published={list(now[2])}")
    return now


def shrink(result: RunResult, steps: int) -> RunResult:
    """Drops events one at a time while the run still fails the same invariant."""
    wanted = result.violations[0].invariant
    best = result
    changed = True
    while changed and len(best.events) > 1:
        changed = False
        for i in range(len(best.events)):
            candidate = best.events[:i] + best.events[i + 1:]
            attempt = run(best.seed, best.dialect, steps, candidate, scale_up=best.scale_up)
            if any(v.invariant == wanted for v in attempt.violations):
                best, changed = attempt, True
                break
    return best
