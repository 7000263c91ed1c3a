"""Seeded fault schedules: which faults happen, to whom, and when.

A schedule is a list of `Event`s at virtual times; the same seed always gives the same schedule.
Shrinking drops events and keeps the rest unchanged (each event carries its own parameters).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Fault kinds and their weights (how often the generator picks each).
KINDS = {
    "kill_process": 4,      # an engine process dies (its NodeManager sees the exit)
    "executor_death": 4,    # the API stays up, status dead
    "unhealthy": 3,         # a rank's own soft fault: it and its peers diagnose, then unhealthy
    "fail_vote": 1,         # the next scale-down vote fails (vllm: every survivor dead)
    "slow_rebuild": 1,      # the next rebuild takes longer than the check-in window
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
}


@dataclass(frozen=True)
class Event:
    at_sec: float
    kind: str
    rank: int = -1
    pod: int = -1
    duration_sec: float = 0.0

    def describe(self) -> str:
        who = f" rank={self.rank}" if self.rank >= 0 else (f" pod={self.pod}" if self.pod >= 0 else "")
        how = f" for {self.duration_sec:.1f}s" if self.duration_sec else ""
        return f"{self.kind}{who}{how}"


def generate(rng: random.Random, steps: int, step_sec: float, ranks: list[int], pods: int) -> list[Event]:
    """1–3 faults in the first two thirds of the run (the rest lets them end): each at a random
    moment, or half of the time a few seconds after the previous one, so that it lands inside
    the detection, the collection window or the round the previous fault started."""
    horizon = steps * step_sec * 2 / 3
    kinds, weights = list(KINDS), list(KINDS.values())
    events: list[Event] = []
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        kind = rng.choices(kinds, weights)[0]
        if events and rng.random() < 0.5:
            at = round(min(events[-1].at_sec + rng.uniform(0.1, 8.0), horizon + 8.0), 3)
        else:
            at = round(rng.uniform(5.0, max(6.0, horizon)), 3)
        rank = rng.choice(ranks) if kind in ("kill_process", "executor_death", "unhealthy", "hang_status") else -1
        pod = rng.randrange(pods) if kind == "nm_crash" else -1
        duration = {"hang_status": rng.uniform(1, 8), "nm_crash": rng.uniform(1, 20),
                    "controller_restart": rng.uniform(0.5, 15),
                    "leader_crash": rng.uniform(0.5, 15), "leader_partition": rng.uniform(1, 15),
                    "replica_restart": rng.uniform(0.5, 15), "lossy_network": rng.uniform(2, 20),
                    "slow_rebuild": rng.uniform(8, 20), "store_outage": rng.uniform(1, 15)}.get(kind, 0.0)
        events.append(Event(at, kind, rank, pod, round(duration, 3)))
    return sorted(events, key=lambda e: (e.at_sec, e.kind, e.rank, e.pod))
