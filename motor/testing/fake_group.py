"""A simulated DP communication domain for the light fake engine: every rank of one instance in one
process, speaking the reference engine's FT protocol (vLLM dialect, `motor/sim/README.md`) without
torch, so benchmarks can run hundreds of ranks per process.

What it does, per rank (original ids kept):

* ``healthy`` → on a peer's fault, after ``detect_sec`` (the failed collective) → ``diagnosing`` for
  ``diagnosing_sec`` (0: no such phase) → ``unhealthy`` with ``fault_info`` "RuntimeError" and
  ``mask`` (the members that failed). Ranks always step (as after a committed scale-down, or
  under load), so a peer's death is always seen.
* ``executor_death`` → ``dead`` ("EngineDeadError"), API up; ``kill_process`` → the same in the
  group, and the serving layer stops the rank's listener (``killed``).
* A rank's engine process is stood in for by a placeholder its NodeManager runs
  (`motor.testing.fake_placeholder`); its stop (``stopped``: ``dead``, ``/health`` 503, peers see
  the failed collective) and its start again after a stop or a kill (a fresh healthy member of the
  group, listener open again) are reported here, so a whole-instance reconfiguration restarts it.
* The reference engine's other faults, by the same names and parameters (`motor.sim.injection`):
  ``fail_next_apply`` (the next accepted apply ends the rank ``dead``, "Recovery failed; full
  restart required", without checking in: the round then fails on every survivor),
  ``stall_next_apply`` (the next accepted apply never completes: the rank stays ``unhealthy`` in
  recovery, later applies are ignored), ``fail_vote`` (the rank checks in, then votes against
  committing: every survivor ``dead``), ``slow_rebuild`` (the round's rebuild waits ``delay_sec``
  more), ``hang_status`` (the status route does not answer for ``duration_sec``, or until
  ``clear``), ``unhealthy`` and ``clear``; the armed state is `motor.sim.injection_state`'s.
* ``POST apply`` ``scale_down``: the engine's rules (only while ``unhealthy``; non-empty
  ``request_id``; ``removed_dp_ranks`` in range, not this rank, not every member, at least one newly
  removed, master address required when the lowest member is removed). Each accepted apply is a
  check-in to the round of its request_id; once every survivor checked in, after ``rebuild_sec``
  every survivor is ``healthy`` in the new group. A survivor missing at the end of ``checkin_sec``
  makes every checked-in survivor ``dead`` ("Recovery failed; full restart required").
* A journal of every transition and every apply received, with its wall time (``time.time()``, the
  Controller's timeline clock), so a benchmark can split engine time from control-plane time.

Not simulated: expert placement (every round is feasible), the RFC-era dialect, ``retry``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from motor.sim.injection_state import InjectionState, reason_param

log = logging.getLogger("motor.testing.fake_group")

FAULT_INFO = "RuntimeError"
DEAD_INFO = "EngineDeadError"
STOPPED_INFO = "engine stopped"
RECOVERY_FAILED_INFO = "Recovery failed; full restart required"
# Bounded: a long benchmark run must not grow it forever.
MAX_JOURNAL = 200_000
# The reference engine's fault names (motor.sim.injection.FAULTS), every one simulated here.
FAULTS = ("kill_process", "executor_death", "hang_status", "unhealthy", "fail_next_apply", "fail_vote",
          "stall_next_apply", "slow_rebuild", "clear")


class ApplyRejected(Exception):
    """400 with this detail (vLLM answers a command it will not run with 400)."""


@dataclass
class GroupRank:
    rank: int
    status: str = "healthy"
    fault_info: str | None = None
    mask: list[int] | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    killed: bool = False
    # Its placeholder was stopped (a restart brings the rank back).
    stopped: bool = False
    # The request id this rank checked in to (a running round), if any.
    round_id: str | None = None
    # The request id of an apply that stalled (injected): it never completes.
    stalled: str | None = None
    injections: InjectionState = field(default_factory=InjectionState)

    def entry(self) -> dict[str, Any]:
        e: dict[str, Any] = {"id": self.rank, "status": self.status}
        for key in ("fault_info", "mask", "last_ft_request_id", "ft_error"):
            value = getattr(self, key)
            if value is not None:
                e[key] = value
        return e

    def push(self, status: str, fault_info: str | None = None, mask: list[int] | None = None) -> None:
        """vLLM replaces the whole entry on every change."""
        self.status, self.fault_info, self.mask = status, fault_info, mask
        self.last_ft_request_id = self.ft_error = None


@dataclass
class _Round:
    request_id: str
    removed: frozenset[int]
    survivors: frozenset[int]
    master: tuple[str, int] | None
    checked_in: dict[int, float] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    done: bool = False
    # Survivor → why it votes against committing (fail_vote, taken when it checked in).
    votes_no: dict[int, str] = field(default_factory=dict)
    # The slowest survivor's slow_rebuild delay.
    extra_rebuild_sec: float = 0.0
    # A member restarted meanwhile: the round's timers do nothing any more.
    cancelled: bool = False


class FakeDpGroup:
    """One instance's DP group; every method runs on the event loop (no locks needed)."""

    def __init__(self, ranks: list[int], *, diagnosing_sec: float = 1.5, rebuild_sec: float = 0.05,
                 checkin_sec: float = 10.0, detect_sec: float = 0.0, dp_master: tuple[str, int] = ("127.0.0.1", 0),
                 clock: Callable[[], float] = time.time) -> None:
        self.dp_size = len(ranks)
        if sorted(ranks) != list(range(self.dp_size)):
            raise ValueError(f"a simulated group needs every rank 0..n-1 in this process, got {sorted(ranks)}")
        self.ranks = {r: GroupRank(r) for r in ranks}
        self.members: set[int] = set(ranks)
        self.removed: set[int] = set()
        self.master = dp_master
        self.diagnosing_sec = diagnosing_sec
        self.rebuild_sec = rebuild_sec
        self.checkin_sec = checkin_sec
        self.detect_sec = detect_sec
        self._clock = clock
        self._rounds: dict[str, _Round] = {}
        # request id → why it failed: a survivor's apply arriving after the round failed fails too.
        self._failed: dict[str, str] = {}
        self._initial_master = dp_master
        self._generation = 0
        self.journal: list[dict[str, Any]] = []
        # Called when a rank is killed (the serving layer stops its listener) and when a killed rank
        # starts again (it opens it again).
        self.on_kill: Callable[[int], None] = lambda rank: None
        self.on_start: Callable[[int], None] = lambda rank: None

    # -- journal ---------------------------------------------------------------------------------
    def _note(self, rank: int, event: str, **facts: Any) -> None:
        if len(self.journal) >= MAX_JOURNAL:
            del self.journal[: MAX_JOURNAL // 10]
        self.journal.append({"at_unix_sec": self._clock(), "rank": rank, "event": event, **facts})

    def _later(self, delay_sec: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay_sec), fn)

    # -- faults ----------------------------------------------------------------------------------
    def inject(self, rank: int, fault: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One of FAULTS on `rank`, with the reference engine's parameters; the rank's entry after it."""
        params = params or {}
        r = self.ranks[rank]
        armed = r.injections
        if fault in ("executor_death", "kill_process"):
            if r.status != "dead":
                r.push("dead", DEAD_INFO)
            self._note(rank, "dead", fault=fault)
            if fault == "kill_process":
                r.killed = True
                self.on_kill(rank)
            self._peers_fail(exclude=rank)
        elif fault == "unhealthy":
            reason_param(params, "injected fault")
            self._note(rank, "fault", fault=fault)
            self._fail_rank(rank, [])
        elif not armed.arm(fault, params):
            raise ValueError(f"unknown fault {fault!r}; expected one of: {', '.join(FAULTS)}")
        if fault not in ("executor_death", "kill_process", "unhealthy"):
            self._note(rank, "armed", fault=fault, params=params)
        return r.entry()

    def _peers_fail(self, exclude: int) -> None:
        """Every stepping member sees the failed collective after detect_sec."""
        generation = self._generation
        for peer in sorted(self.members - {exclude}):
            if self.ranks[peer].status == "healthy":
                self._later(self.detect_sec, lambda p=peer: self._detect(p, generation))

    def _dead_members(self) -> list[int]:
        return sorted(m for m in self.members if self.ranks[m].status == "dead")

    def _detect(self, rank: int, generation: int) -> None:
        r = self.ranks[rank]
        if generation != self._generation or r.status != "healthy" or r.round_id is not None:
            return
        if self.diagnosing_sec > 0:
            r.push("diagnosing")
            self._note(rank, "diagnosing")
            self._later(self.diagnosing_sec, lambda: self._fail_rank(rank, None, generation))
        else:
            self._fail_rank(rank, None, generation)

    def _fail_rank(self, rank: int, mask: list[int] | None, generation: int | None = None) -> None:
        r = self.ranks[rank]
        if generation is not None and generation != self._generation:
            return
        if r.status not in ("healthy", "diagnosing") or r.round_id is not None:
            return
        r.push("unhealthy", FAULT_INFO, self._dead_members() if mask is None else mask)
        self._note(rank, "unhealthy")

    # -- lifecycle -------------------------------------------------------------------------------
    def stopped(self, rank: int) -> None:
        """The rank's placeholder was stopped: the rank is down; members still stepping see it."""
        r = self.ranks[rank]
        r.stopped = True
        if r.status != "dead":
            r.push("dead", STOPPED_INFO)
        self._note(rank, "stopped")
        if rank in self.members:
            self._peers_fail(exclude=rank)

    def started(self, rank: int) -> None:
        """The rank's placeholder started. After a stop or a kill the rank is a fresh engine: healthy,
        a member again, no armed faults; the rounds it took part in are over. A first start changes
        nothing."""
        old = self.ranks[rank]
        if not (old.stopped or old.killed):
            self._note(rank, "started")
            return
        for rnd in [x for x in self._rounds.values() if rank in x.survivors]:
            rnd.cancelled = True
            if rnd.timer is not None:
                rnd.timer.cancel()
            self._rounds.pop(rnd.request_id, None)
        self._generation += 1
        self.ranks[rank] = GroupRank(rank)
        self.members.add(rank)
        self.removed.discard(rank)
        if self.members == set(self.ranks) and not self.removed:
            self.master = self._initial_master
        self._note(rank, "restarted")
        if old.killed:
            self.on_start(rank)

    # -- apply -----------------------------------------------------------------------------------
    def apply(self, rank: int, body: Any) -> str:
        """Checks the command in; returns the request id for the 202, raises ApplyRejected for a 400."""
        r = self.ranks[rank]
        if not isinstance(body, dict):
            raise ApplyRejected("body is not a JSON object")
        instruction, request_id = body.get("instruction"), body.get("request_id")
        self._note(rank, "received", instruction=instruction, request_id=request_id)
        if instruction != "scale_down":
            raise ApplyRejected("Invalid instruction")
        if not isinstance(request_id, str) or not request_id:
            raise ApplyRejected(f"request_id {request_id!r} must be a non-empty string")
        if r.stalled is not None:  # as the engine ignores a command while its recovery runs
            self._note(rank, "ignored", request_id=request_id, stalled=r.stalled)
            return request_id
        if r.status != "unhealthy" or r.round_id is not None:
            self._reject(r, request_id, f"rank {rank} is {r.status}; scale_down is only accepted while the engine "
                                        "is unhealthy")
        params = body.get("params") if isinstance(body.get("params"), dict) else {}
        removed_raw = params.get("removed_dp_ranks")
        if not isinstance(removed_raw, list) or not removed_raw or not all(isinstance(x, int) for x in removed_raw):
            self._reject(r, request_id, f"params.removed_dp_ranks {removed_raw!r} must be a non-empty list of ranks")
        bad = [x for x in removed_raw if not 0 <= x < self.dp_size]
        if bad:
            self._reject(r, request_id, f"params.removed_dp_ranks {bad} are outside 0..{self.dp_size - 1}")
        removed = frozenset(removed_raw) | frozenset(self.removed)
        survivors = frozenset(self.members - removed)
        if rank in removed:
            self._reject(r, request_id, f"removed_dp_ranks {sorted(removed)} names this engine's own rank {rank}")
        if not survivors:
            self._reject(r, request_id, f"removed_dp_ranks {sorted(removed)} would remove every rank")
        if not removed - self.removed:
            self._reject(r, request_id, f"removed_dp_ranks {sorted(removed_raw)} names no newly removed rank")
        master = None
        if params.get("dp_master_ip") is not None or params.get("dp_store_port") is not None:
            master = (str(params.get("dp_master_ip")), int(params.get("dp_store_port") or 0))
        if min(self.members) in removed and master is None:
            self._reject(r, request_id, f"params.dp_master_ip/dp_store_port are required (dp master rank "
                                        f"{min(self.members)} is removed)")
        if request_id in self._failed:  # too late: the round's survivors already gave up
            r.push("dead", RECOVERY_FAILED_INFO)
            r.last_ft_request_id, r.ft_error = request_id, self._failed[request_id]
            self._note(rank, "dead", request_id=request_id, reason="round already failed")
            return request_id
        rnd = self._rounds.get(request_id)
        if rnd is None:
            rnd = self._rounds[request_id] = _Round(request_id, removed, survivors, master)
            rnd.timer = self._later(self.checkin_sec, lambda: self._round_timeout(rnd))
        elif rnd.removed != removed or rnd.survivors != survivors:
            self._reject(r, request_id, f"round {request_id} removes {sorted(rnd.removed)}, this apply "
                                        f"{sorted(removed)}")
        failure = r.injections.take_fail_next_apply()
        if failure is not None:  # accepted, then fails before checking in: the round cannot commit
            r.push("dead", RECOVERY_FAILED_INFO)
            r.last_ft_request_id, r.ft_error = request_id, f"injected failure: {failure}"
            self._note(rank, "dead", request_id=request_id, reason="injected apply failure")
            return request_id
        if r.injections.take_stall_next_apply():  # accepted, never checks in nor recovers
            r.round_id = r.stalled = request_id
            self._note(rank, "stalled", request_id=request_id)
            return request_id
        vote_no = r.injections.take_fail_vote()
        if vote_no is not None:
            rnd.votes_no[rank] = vote_no
        rnd.extra_rebuild_sec = max(rnd.extra_rebuild_sec, r.injections.slow_rebuild_sec)
        rnd.checked_in[rank] = self._clock()
        r.round_id = request_id
        self._note(rank, "apply", request_id=request_id)
        if set(rnd.checked_in) >= rnd.survivors and not rnd.done:
            rnd.done = True
            if rnd.timer is not None:
                rnd.timer.cancel()
            self._note(-1, "all_checked_in", request_id=request_id)
            self._later(self.rebuild_sec + rnd.extra_rebuild_sec, lambda: self._commit(rnd))
        return request_id

    def _reject(self, r: GroupRank, request_id: str, error: str) -> None:
        r.last_ft_request_id, r.ft_error = request_id, error
        self._note(r.rank, "rejected", request_id=request_id, error=error)
        raise ApplyRejected(error)

    def _commit(self, rnd: _Round) -> None:
        if rnd.cancelled:
            return
        if rnd.votes_no:
            noes = ", ".join(f"rank {rank}: {why}" for rank, why in sorted(rnd.votes_no.items()))
            self._fail_round(rnd, f"scale_down failed: the vote to commit failed ({noes})", "vote failed")
            return
        self._generation += 1
        self.removed = set(rnd.removed)
        self.members = set(rnd.survivors)
        if rnd.master is not None:
            self.master = rnd.master
        for rank in sorted(rnd.survivors):
            r = self.ranks[rank]
            r.round_id = None
            if r.status == "dead":
                continue
            r.push("healthy")
            self._note(rank, "healthy", request_id=rnd.request_id)
        self._rounds.pop(rnd.request_id, None)
        # A member that died while the group rebuilt is seen by the new group's first collective.
        if self._dead_members():
            self._peers_fail(exclude=-1)

    def _round_timeout(self, rnd: _Round) -> None:
        if rnd.done or rnd.cancelled:
            return
        missing = sorted(rnd.survivors - set(rnd.checked_in))
        # The reference engine's words (its join barrier's).
        self._fail_round(rnd, f"scale_down failed: dp ranks {missing} did not join DP group {rnd.request_id!r} "
                              f"(members {sorted(rnd.survivors)}) within the {self.checkin_sec:g}s check-in window",
                         "check-in timeout")

    def _fail_round(self, rnd: _Round, error: str, reason: str) -> None:
        """vLLM: survivors that cannot commit a scale_down are beyond repair."""
        for rank in sorted(rnd.checked_in):
            r = self.ranks[rank]
            r.round_id = None
            if r.status != "dead":
                r.push("dead", RECOVERY_FAILED_INFO)
            r.last_ft_request_id = rnd.request_id
            r.ft_error = error
            self._note(rank, "dead", request_id=rnd.request_id, reason=reason)
        self._rounds.pop(rnd.request_id, None)
        self._failed[rnd.request_id] = error

    # -- views -----------------------------------------------------------------------------------
    def serving(self, rank: int) -> bool:
        r = self.ranks[rank]
        return r.status == "healthy" and r.round_id is None and not r.killed and not r.stopped

    def describe(self) -> dict[str, Any]:
        return {"dp_size": self.dp_size, "members": sorted(self.members), "removed": sorted(self.removed),
                "master": list(self.master), "generation": self._generation,
                "statuses": {str(r): s.status for r, s in self.ranks.items()}}

