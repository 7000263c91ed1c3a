"""Seeded fault schedules: which faults happen, to whom, and when.

A schedule is a list of `Event`s; the same seed always gives the same schedule. An event fires
`at_sec` after the schedule starts or, when it names an anchor (`after`), `at_sec` after that
anchor first happens once the schedule started (an FT phase the instance enters, a call the
Controller makes, a survivor's recovery, see ANCHORS); an anchor that never happens leaves its
event unfired.
Shrinking drops events and keeps the rest unchanged (each event carries its own parameters).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from motor.controller.hardware.levels import L1, L4, L6, is_severe

# Fault kinds and their weights (how often the generator picks each).
KINDS = {
    "kill_process": 4,      # an engine process dies (its NodeManager sees the exit)
    "executor_death": 4,    # the API stays up, status dead
    "unhealthy": 3,         # a rank's own soft fault: it and its peers diagnose, then unhealthy
    "fail_vote": 1,         # the next scale-down vote fails (vllm: every survivor dead)
    "slow_rebuild": 1,      # the next rebuild takes longer than the check-in window
    "uneven_recovery": 1,   # from now on survivors end their rebuilds up to `duration_sec` apart
    "hang_status": 1,       # a rank's status route hangs for a while
    "nm_crash": 1,          # a NodeManager crashes (its engines with it) and restarts later
    "controller_restart": 1,  # every Controller replica crashes; they start again over the same store
    "leader_crash": 1,      # the leader's process dies; a standby takes over once its lease ends
    "leader_partition": 1,  # the leader loses etcd for a while: it steps down, another one takes over
    "replica_restart": 1,   # a standby's process dies and starts again
    "coordinator_restart": 1,  # the Coordinator restarts with an empty routing table
    "lossy_network": 1,     # for a while, calls are lost, duplicated and delayed
    "store_outage": 1,      # for a while, every store write fails
    "traffic": 2,           # requests resume: an idle group notices its dead peers
    "hardware_fault": 4,    # MindCluster reports a card or node fault (motor.simulation.hardware)
}

# Not generated (a weight here would reshuffle every seed's schedule), for explicit schedules and
# `scale_up_events` only: "restore", an operator asks for a capacity restoration (RestoreInstance
# with when_ready).
EXPLICIT_KINDS = ("restore",)
# What `scale_up_events` throws at an elastic scale-up round (anchored at its SCALING_UP phase).
SCALE_UP_FAULTS = {"executor_death": 3, "kill_process": 3, "unhealthy": 1, "hang_status": 1, "nm_crash": 1,
                   "leader_crash": 1, "hardware_fault": 2}

# The faults of a round-focused schedule (`generate_focused`) and the anchors they land on: a
# death that starts a round, then faults a few hundred milliseconds into its short phases.
FOCUSED_KINDS = {"executor_death": 4, "kill_process": 2, "hardware_fault": 4, "unhealthy": 1, "hang_status": 1}
FOCUSED_ANCHORS = ("evidence", "pull", "DECIDING", "WAITING_ENGINE_FAULT", "SCALING_DOWN", "guard", "apply",
                   "recovered", "POST_SCALE_CLEANUP")
# What an event may be anchored to: the FT phases a round goes through; the first software
# evidence the acting Controller holds (its collection window is open); the first snapshot pull,
# guard and apply the Controller sends; the first survivor whose rebuild ended ("recovered": the
# round still polls while the others rebuild).
ANCHORS = ("DECIDING", "WAITING_ENGINE_FAULT", "SCALING_DOWN", "POST_SCALE_CLEANUP", "RECONFIGURING",
           "SCALED_DOWN_RUNNING", "apply", "evidence", "pull", "guard", "recovered")
# Anchors that name a rank (the survivor that recovered): an event may strike that rank.
RANK_ANCHORS = ("recovered",)
# Where a hardware fault is: the card of `rank`, the whole node of `pod`, or a card or node no pod
# hosts (a card name in no known form on our node, a card number no endpoint lists, another node).
TARGETS = ("card", "node", "unknown_card_format", "foreign_card", "foreign_node")


@dataclass(frozen=True)
class Event:
    at_sec: float
    kind: str
    rank: int = -1
    pod: int = -1
    duration_sec: float = 0.0
    # An anchor from ANCHORS: `at_sec` counts from when it first happens ("" counts from the start).
    after: str = ""
    # The event strikes the rank its anchor names (RANK_ANCHORS), not `rank`.
    anchor_rank: bool = False
    # hardware_fault: the FaultLevel (1..6), where (TARGETS), and for a severe fault that kills
    # its ranks (after `duration_sec`) whether the report comes first and how the engines die.
    level: int = 0
    target: str = ""
    hardware_first: bool = False
    kill: str = ""  # "executor_death" or "kill_process"

    def describe(self) -> str:
        who = f" rank={self.rank}" if self.rank >= 0 else (f" pod={self.pod}" if self.pod >= 0 else "")
        if self.anchor_rank:
            who = f" rank=<{self.after}>"
        hw = ""
        if self.kind == "hardware_fault":
            hw = f" L{self.level} {self.target}"
            if self.kill:
                hw += f" {'hardware' if self.hardware_first else 'software'}-first {self.kill}"
        how = f" for {self.duration_sec:.1f}s" if self.duration_sec else ""
        when = f" (at {self.after}+{self.at_sec:.3f}s)" if self.after else ""
        return f"{self.kind}{who}{hw}{how}{when}"


def _hardware(rng: random.Random, ranks: list[int], pods: int, severe_or_unmappable: bool = False) -> dict:
    target = rng.choices(TARGETS, (6, 1, 1, 1, 1) if not severe_or_unmappable else (3, 0, 1, 1, 1))[0]
    level = rng.randint(L4 if severe_or_unmappable else L1, L6)
    fields = {"level": level, "target": target,
              "rank": rng.choice(ranks) if target == "card" else -1,
              "pod": rng.randrange(pods) if target in ("node", "unknown_card_format", "foreign_card") else -1}
    hardware_first, kill = rng.random() < 0.5, rng.choice(("executor_death", "kill_process"))
    if is_severe(level) and target in ("card", "node"):
        fields.update(hardware_first=hardware_first, kill=kill)
    return fields


def generate(rng: random.Random, steps: int, step_sec: float, ranks: list[int], pods: int) -> list[Event]:
    """1–3 faults in the first two thirds of the run (the rest lets them end). The first at a random
    moment; each later one a third of the time at a random moment, a third a few seconds after the
    previous one (so that it lands inside the detection, the window or the round the previous fault
    started), a third 0–3 s after a random anchor (inside a round's short phases)."""
    horizon = steps * step_sec * 2 / 3
    kinds, weights = list(KINDS), list(KINDS.values())
    events: list[Event] = []
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        kind = rng.choices(kinds, weights)[0]
        how = rng.randrange(3) if events else 0
        after = ""
        if how == 1:
            after = events[-1].after
            at = round(min(events[-1].at_sec + rng.uniform(0.1, 8.0), horizon + 8.0), 3)
        elif how == 2:
            after = rng.choice(ANCHORS)
            at = round(rng.uniform(0.0, 3.0), 3)
        else:
            at = round(rng.uniform(5.0, max(6.0, horizon)), 3)
        rank = rng.choice(ranks) if kind in ("kill_process", "executor_death", "unhealthy", "hang_status") else -1
        pod = rng.randrange(pods) if kind == "nm_crash" else -1
        duration = {"hang_status": rng.uniform(1, 8), "nm_crash": rng.uniform(1, 20),
                    "controller_restart": rng.uniform(0.5, 15),
                    "leader_crash": rng.uniform(0.5, 15), "leader_partition": rng.uniform(1, 15),
                    "replica_restart": rng.uniform(0.5, 15), "lossy_network": rng.uniform(2, 20),
                    "slow_rebuild": rng.uniform(8, 20), "store_outage": rng.uniform(1, 15),
                    "uneven_recovery": rng.uniform(2, 6),
                    "hardware_fault": rng.uniform(0, 8)}.get(kind, 0.0)
        extra = _hardware(rng, ranks, pods) if kind == "hardware_fault" else {"rank": rank, "pod": pod}
        events.append(Event(at, kind, duration_sec=round(duration, 3), after=after, **extra))
    return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))


# The narrow windows of a round that a round-focused schedule aims at, one per schedule (besides
# the general one): a survivor dying after its own recovery read while the others still rebuild;
# a hardware report that no rank maps to between the guard and the apply; a rank's death while a
# snapshot pull that read it unhealthy is on its way back (over a slow network).
WINDOWS = ("any", "after_recovery_read", "unmappable_before_apply", "death_under_pull")


def generate_focused(rng: random.Random, steps: int, step_sec: float, ranks: list[int], pods: int) -> list[Event]:
    """A round and faults inside it: a death at a random moment, then faults in one of `WINDOWS`;
    for "any", half the time with survivors that recover seconds apart, one or two faults 0–2.5 s
    after an anchor in the round's short phases (a survivor dying after it was read, a hardware
    report on a rank the round keeps or on nothing the instance hosts, a hung status route)."""
    horizon = steps * step_sec / 3
    first = rng.choice(("executor_death", "kill_process"))
    first_at = round(rng.uniform(5.0, max(6.0, horizon)), 3)
    events = [Event(first_at, first, rank=rng.choice(ranks))]
    window = rng.choice(WINDOWS)
    if window == "after_recovery_read":
        events.append(Event(0.0, "uneven_recovery", duration_sec=round(rng.uniform(3, 6), 3)))
        events.append(Event(round(rng.uniform(0.1, 1.5), 3), rng.choice(("executor_death", "kill_process")),
                            after="recovered", anchor_rank=True))
        return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))
    if window == "unmappable_before_apply":
        target = rng.choice(("unknown_card_format", "foreign_card"))
        events.append(Event(round(rng.uniform(0.0, 1.0), 3), "hardware_fault", after="guard", target=target,
                            level=rng.randint(L4, L6), pod=rng.randrange(pods), duration_sec=0.0))
        return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))
    if window == "death_under_pull":
        rank = rng.choice(ranks)
        events = [Event(0.0, "lossy_network", duration_sec=round(first_at + 20.0, 3)),
                  Event(first_at, "unhealthy", rank=rank),
                  Event(round(rng.uniform(0.0, 0.4), 3), "executor_death", rank=rank, after="pull")]
        return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))
    if rng.random() < 0.5:
        # Survivors whose rebuilds end seconds apart: the round reads some healthy, polls the rest.
        events.append(Event(0.0, "uneven_recovery", duration_sec=round(rng.uniform(2, 6), 3)))
    kinds, weights = list(FOCUSED_KINDS), list(FOCUSED_KINDS.values())
    for _ in range(rng.choice((1, 2))):
        kind = rng.choices(kinds, weights)[0]
        after, at = rng.choice(FOCUSED_ANCHORS), round(rng.uniform(0.0, 2.5), 3)
        if kind == "hardware_fault":
            events.append(Event(at, kind, duration_sec=round(rng.uniform(0, 8), 3), after=after,
                                **_hardware(rng, ranks, pods, severe_or_unmappable=True)))
        else:
            # Half of the faults after a survivor's recovery strike that survivor: it was read
            # healthy, and the round goes on polling the others.
            on_anchor = after in RANK_ANCHORS and kind != "hang_status" and rng.random() < 0.5
            events.append(Event(at, kind, rank=rng.choice(ranks), after=after, anchor_rank=on_anchor,
                                duration_sec=round(rng.uniform(1, 8), 3) if kind == "hang_status" else 0.0))
    return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))


def survivor_card_events(rng: random.Random, ranks: list[int]) -> list[Event]:
    """Added to a third of the round-focused schedules, from a stream of their own (so the focused
    schedules stay as they are): a severe fault on one rank's card reported 0–1 s after the first
    software evidence, before the decision, its engine dying only 3–8 s after the report. On a
    survivor that is evidence for the round (RFC §4.2): the round must not commit a scale-down that
    keeps the rank, whether the report came before or after the decision."""
    if rng.random() >= 1 / 3:
        return []
    return [Event(round(rng.uniform(0.0, 1.0), 3), "hardware_fault", rank=rng.choice(ranks), after="evidence",
                  level=rng.randint(L4, L6), target="card", hardware_first=True,
                  kill=rng.choice(("executor_death", "kill_process")), duration_sec=round(rng.uniform(3.0, 8.0), 3))]


def scale_up_events(rng: random.Random, ranks: list[int], pods: int) -> list[Event]:
    """Added to a schedule when the engines declare scale_up (`python -m motor.simulation
    --scale-up`): an operator's restoration once the instance serves scaled down, and none, one or
    two faults 0–4 s into the scale-up round it starts (a survivor's or a joiner's death, a NodeManager
    or leader crash, a hung status route, a hardware report). From a stream of its own, so the
    generated schedules stay as they are."""
    events = [Event(round(rng.uniform(0.5, 8.0), 3), "restore", after="SCALED_DOWN_RUNNING")]
    kinds, weights = list(SCALE_UP_FAULTS), list(SCALE_UP_FAULTS.values())
    for _ in range(rng.choice((0, 1, 1, 2))):
        kind = rng.choices(kinds, weights)[0]
        at = round(rng.uniform(0.0, 4.0), 3)
        if kind == "hardware_fault":
            events.append(Event(at, kind, duration_sec=round(rng.uniform(0, 8), 3), after="SCALING_UP",
                                **_hardware(rng, ranks, pods, severe_or_unmappable=True)))
            continue
        duration = {"hang_status": rng.uniform(1, 8), "nm_crash": rng.uniform(1, 20),
                    "leader_crash": rng.uniform(0.5, 15)}.get(kind, 0.0)
        events.append(Event(at, kind, rank=rng.choice(ranks) if kind not in ("nm_crash", "leader_crash") else -1,
                            pod=rng.randrange(pods) if kind == "nm_crash" else -1, duration_sec=round(duration, 3),
                            after="SCALING_UP"))
    return sorted(events, key=lambda e: (e.after, e.at_sec, e.kind, e.rank, e.pod))
