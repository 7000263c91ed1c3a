"""The simulated engines of one instance: one DP group and its ranks' FT state machines, per dialect.

What an engine says is a raw JSON document, as its HTTP API would write it; the NodeManager side
parses it with the real `nodemanager.engine_answers`.

Dialects:
- `vllm` (vLLM PR #46370): healthy → diagnosing (the mask probe) → unhealthy with `mask`; executor
  death → dead. No `ft_state`. scale_down only while unhealthy (else 400); every survivor must
  check in within the check-in window, then all vote; a failed vote or a missed check-in makes every
  survivor dead ("Recovery failed; full restart required").
- `rfc` (RFC-era vLLM-Ascend): no diagnosing; `ft_state` recovering after an accepted apply,
  failed (unhealthy) when the round fails; `last_ft_request_id` survives status changes.
- `vllm-0.33` (vLLM 0.33.0): diagnosing like `vllm`, but scale_down is refused (400, retry-only):
  every fault but a transient one (fast recovery) ends in a reconfiguration.

Every dialect takes `retry` (fast recovery): only while unhealthy (vllm, rfc: 400 otherwise;
vllm-0.33 answers 202 with a request id of its own and names the refusal in status), every member
of the group must check in within the window, then the same group is rebuilt; a failed retry leaves
the members unhealthy with `ft_error` (rfc: `ft_state` failed), never dead. `vllm` and `rfc` also
take `scale_up` and start processes in join mode (`motor.simulation.scale_up_engines`).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass, field

from motor.simulation.scale_up_engines import apply_scale_up, spawn_joiner

DIALECTS = ("vllm", "rfc", "vllm-0.33", "sglang")  # sglang: motor.simulation.sglang_group
RECOVERY_FAILED = "Recovery failed; full restart required"


@dataclass
class SimEngine:
    rank: int
    status: str = "healthy"
    ft_state: str | None = None
    fault_info: str | None = None
    mask: tuple[int, ...] = ()
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    # The process (API) runs; False once it died or was stopped.
    process_up: bool = False
    ready: bool = False
    # The last apply request_id this rank took (duplicates are ignored).
    applied: str | None = None
    # Started in join mode: no group until a scale_up round commits.
    joiner: bool = False

    def document(self, dialect: str) -> bytes:
        entry: dict[str, object] = {"id": self.rank, "status": self.status}
        for key in ("fault_info", "last_ft_request_id", "ft_error"):
            value = getattr(self, key)
            if value is not None:
                entry[key] = value
        if self.mask:
            entry["mask"] = list(self.mask)
        if dialect == "rfc" and self.ft_state is not None:
            entry["ft_state"] = self.ft_state
        return json.dumps({"schema_version": 1, "total_engines": 1, "engines": [entry]}).encode()

    def set(self, status: str, *, fault_info: str | None = None, mask: tuple[int, ...] = (),
            ft_state: str | None = None, dialect: str = "vllm") -> None:
        self.status, self.fault_info, self.mask, self.ft_state = status, fault_info, mask, ft_state
        if dialect != "rfc":  # every change replaces the whole entry
            self.last_ft_request_id = self.ft_error = None


@dataclass
class _Round:
    request_id: str
    survivors: frozenset[int]
    checked_in: set[int] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    retry: bool = False
    scale_up: bool = False
    # The request id each rank's engine named in its 202 (vllm-0.33 makes its own).
    ids: dict[int, str] = field(default_factory=dict)


@dataclass
class Knobs:
    """Per-schedule behaviour of the group (set by the fault schedule)."""

    diagnosing_sec: float = 1.5
    peer_detect_sec: float = 0.3
    checkin_window_sec: float = 10.0
    rebuild_sec: float = 2.0
    load_sec: float = 3.0
    # After a successful vote each survivor finishes rebuilding at its own pace, up to this much
    # later than the first (a survivor may serve while another still recovers).
    recovery_skew_sec: float = 2.0
    fail_next_vote: bool = False
    # No traffic: ranks run no collectives, so a peer's death is seen only with the next request.
    idle: bool = False


class SimGroup:
    """The DP group of one instance: membership, fault propagation, scale-down rounds, formation."""

    round_type = _Round

    def __init__(self, ranks: list[int], dialect: str, knobs: Knobs, on_change=lambda: None) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect {dialect!r} is not one of {DIALECTS}")
        self.dialect = dialect
        self.knobs = knobs
        self.engines = {r: SimEngine(r) for r in ranks}
        self.members: set[int] = set()
        self._forming: set[int] = set()
        self._formation: asyncio.TimerHandle | None = None
        self._round: _Round | None = None
        # Ranks whose status route hangs (the NodeManager's reads time out).
        self.hung: set[int] = set()
        # Deaths no survivor has noticed yet (idle group).
        self._unseen: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_change = on_change

    def _spawn_task(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._formation is not None:
            self._formation.cancel()

    # -- processes ---------------------------------------------------------------------------
    def spawn(self, rank: int, join: bool = False) -> None:
        """A fresh process; it is ready once every rank of the instance joined a new group (a
        joiner: once loaded)."""
        if join:
            spawn_joiner(self, rank)
            return
        eng = self.engines[rank]
        self.engines[rank] = eng = SimEngine(rank, process_up=True)
        self.members.discard(rank)
        self._forming.add(rank)
        if self._forming == set(self.engines) and self._formation is None:
            self._formation = asyncio.get_running_loop().call_later(self.knobs.load_sec, self._formed)
        del eng

    def _formed(self) -> None:
        self._formation = None
        ranks = {r for r in self._forming if self.engines[r].process_up}
        self._forming.clear()
        if ranks != set(self.engines):
            return  # a rank died while loading: nobody gets ready (the DP init never completes)
        self.members = set(ranks)
        self._round = None
        self._unseen = set()
        for r in ranks:
            self.engines[r].ready = True
        self._on_change()

    def stop(self, rank: int) -> None:
        """The NodeManager stopped the process (or it died): its peers see a collective fail."""
        eng = self.engines[rank]
        was_member = rank in self.members
        eng.process_up = eng.ready = False
        self._forming.discard(rank)
        self.members.discard(rank)
        if was_member:
            self._peer_fault({rank}, "RuntimeError")

    # -- faults ------------------------------------------------------------------------------
    def executor_death(self, rank: int) -> None:
        eng = self.engines[rank]
        if not eng.process_up or rank not in self.members:
            return
        eng.set("dead", fault_info="EngineDeadError", dialect=self.dialect)
        self.members.discard(rank)
        self._peer_fault({rank}, "RuntimeError")
        self._on_change()

    def unhealthy(self, rank: int) -> None:
        """A rank's own soft fault (a hung collective): it and its peers go through diagnosing."""
        if rank not in self.members:
            return
        self._peer_fault(set(), "RuntimeError", also={rank})

    def _peer_fault(self, dead: set[int], info: str, also: set[int] = frozenset()) -> None:
        if self.knobs.idle and not also and self._round is None:
            self._unseen |= dead
            return
        dead = dead | self._unseen
        self._unseen = set()
        survivors = {r for r in self.members if r not in dead} | (also & self.members)
        if self._round is not None and self._round.scale_up:
            # A peer lost while the group grows: the round fails (its participants say so).
            self._round.task.cancel()  # type: ignore[union-attr]
            self._end_round(self._round, False, "a peer failed during the scale-up")
        if self._round is not None and self._round.task is not None:
            self._round.task.cancel()
            self._round = None
        for r in sorted(survivors):
            self._spawn_task(self._diagnose(r, tuple(sorted(dead)), info))

    async def _diagnose(self, rank: int, mask: tuple[int, ...], info: str) -> None:
        eng = self.engines[rank]  # this run of the rank: a relaunched one is not affected

        def gone() -> bool:
            return self.engines[rank] is not eng or not eng.process_up or rank not in self.members

        await asyncio.sleep(self.knobs.peer_detect_sec)
        if gone() or eng.status == "dead":
            return
        if self.dialect != "rfc" and self.knobs.diagnosing_sec > 0:
            eng.set("diagnosing", dialect=self.dialect)
            self._on_change()
            await asyncio.sleep(self.knobs.diagnosing_sec)
            if gone() or eng.status != "diagnosing":
                return
        eng.set("unhealthy", fault_info=info, mask=mask, dialect=self.dialect)
        self._on_change()

    def request(self, rank: int) -> bool:
        """One request to `rank` (traffic, or the Controller's canary): served unless the group
        holds a death nobody noticed, which the request's collective now reveals."""
        eng = self.engines[rank]
        if not (eng.process_up and eng.ready and eng.status == "healthy" and rank in self.members):
            return False
        if self._unseen:
            dead, self._unseen = set(self._unseen), set()
            self.members -= dead
            for r in sorted(self.members):
                self._spawn_task(self._diagnose(r, tuple(sorted(dead)), "RuntimeError"))
            return False
        return True

    def traffic(self) -> None:
        """Requests resume: every member runs collectives again (and idle ends)."""
        self.knobs.idle = False
        for r in sorted(self.members):
            if self.request(r) is False:
                return

    # -- the FT API ----------------------------------------------------------------------------
    def status_answer(self, rank: int) -> bytes | None:
        """The status document rank `rank`'s FT address answers; None: nothing listens there."""
        eng = self.engines[rank]
        return eng.document(self.dialect) if eng.process_up else None

    def apply_reachable(self, rank: int) -> bool:
        return self.engines[rank].process_up

    # -- apply -------------------------------------------------------------------------------
    def apply(self, rank: int, body: str) -> tuple[int, bytes]:
        """(HTTP status, body) of POST /apply: decided before the answer goes out."""
        eng = self.engines[rank]
        try:
            doc = json.loads(body)
            request_id = doc["request_id"]
            if doc.get("instruction") == "retry":
                return self._retry(rank, request_id)
            if doc.get("instruction") == "scale_up":
                return apply_scale_up(self, rank, doc)
            removed = set(doc["params"]["removed_dp_ranks"])
        except (ValueError, KeyError, TypeError) as exc:
            return 400, json.dumps({"detail": f"malformed apply: {exc}"}).encode()
        if doc.get("instruction") != "scale_down" or self.dialect == "vllm-0.33":
            return 400, json.dumps({"detail": "Invalid instruction"}).encode()
        if eng.applied == request_id:
            return 202, json.dumps({"message": "duplicate ignored", "request_id": request_id}).encode()
        if eng.status != "unhealthy":
            if self.dialect == "rfc":
                eng.ft_state, eng.ft_error, eng.last_ft_request_id = "failed", f"rank is {eng.status}", request_id
            else:
                eng.ft_error, eng.last_ft_request_id = f"rank {rank} is {eng.status}", request_id
            return 400, json.dumps({"detail": f"rank {rank} is {eng.status}; scale_down needs unhealthy"}).encode()
        eng.applied = request_id
        if self.dialect == "rfc":
            eng.ft_state, eng.last_ft_request_id = "recovering", request_id
        survivors = frozenset(r for r in self.engines if r not in removed)
        rnd = self._round
        if rnd is None or rnd.request_id != request_id:
            if rnd is not None and rnd.task is not None:
                rnd.task.cancel()
            rnd = self._round = _Round(request_id, survivors)
            rnd.task = asyncio.get_running_loop().create_task(self._run_round(rnd))
        rnd.checked_in.add(rank)
        return 202, json.dumps({"message": "accepted", "request_id": request_id}).encode()

    def _retry(self, rank: int, request_id: str) -> tuple[int, bytes]:
        """A retry: the same group rebuilt once every member checked in (keyed by the sender's
        request id; vllm-0.33 answers with one of its own per engine)."""
        eng = self.engines[rank]
        own = request_id
        if self.dialect == "vllm-0.33":
            own = f"{zlib.crc32(f'{request_id}/{rank}'.encode()):08x}-0000-4000-8000-000000000000"
        if eng.applied == request_id:
            return 202, json.dumps({"message": "duplicate ignored", "request_id": own}).encode()
        if eng.status != "unhealthy":
            if self.dialect == "vllm-0.33":
                eng.ft_error = f"[FT] Rejecting retry on engine {rank}: status is {eng.status.upper()}"
                eng.last_ft_request_id = own
                return 202, json.dumps({"message": "accepted", "request_id": own}).encode()
            if self.dialect == "rfc":
                eng.ft_state, eng.ft_error, eng.last_ft_request_id = "failed", f"rank is {eng.status}", request_id
            else:
                eng.ft_error, eng.last_ft_request_id = f"rank {rank} is {eng.status}", request_id
            return 400, json.dumps({"detail": f"rank {rank} is {eng.status}; retry needs unhealthy"}).encode()
        eng.applied = request_id
        if self.dialect == "rfc":
            eng.ft_state, eng.last_ft_request_id = "recovering", request_id
        rnd = self._round
        if rnd is None or rnd.request_id != request_id:
            if rnd is not None and rnd.task is not None:
                rnd.task.cancel()
            rnd = self._round = _Round(request_id, frozenset(self.members), retry=True)
            rnd.task = asyncio.get_running_loop().create_task(self._run_round(rnd))
        rnd.checked_in.add(rank)
        rnd.ids[rank] = own
        return 202, json.dumps({"message": "accepted", "request_id": own}).encode()

    async def _run_round(self, rnd: _Round) -> None:
        deadline = asyncio.get_running_loop().time() + self.knobs.checkin_window_sec
        while rnd.checked_in != set(rnd.survivors) or any(not self.engines[r].process_up for r in rnd.survivors):
            if asyncio.get_running_loop().time() >= deadline:
                self._end_round(rnd, False, "a survivor did not check in within the window")
                return
            await asyncio.sleep(0.1)
        await asyncio.sleep(self.knobs.rebuild_sec)
        if asyncio.get_running_loop().time() > deadline + self.knobs.rebuild_sec or self.knobs.fail_next_vote:
            self.knobs.fail_next_vote = False
            self._end_round(rnd, False, "the vote failed")
            return
        self._end_round(rnd, True, "")

    def _recovered(self, rank: int, eng: SimEngine, request_id: str, rebuilding: tuple) -> None:
        """A survivor's rebuild done: healthy, unless it died, was replaced or took a new fault meanwhile."""
        if self.engines.get(rank) is not eng or not eng.process_up or (eng.status, eng.fault_info,
                                                                         eng.ft_state) != rebuilding:
            return
        eng.set("healthy", dialect=self.dialect)
        if self.dialect == "rfc":
            eng.last_ft_request_id = request_id
        self._on_change()

    def _retry_failed(self, rnd: _Round, rank: int, why: str) -> None:
        """vLLM: a failed retry is not fatal; the member stays unhealthy and says why."""
        eng = self.engines[rank]
        eng.set("unhealthy", fault_info=why, ft_state="failed" if self.dialect == "rfc" else None,
                dialect=self.dialect)
        eng.ft_error, eng.last_ft_request_id = why, rnd.ids.get(rank, rnd.request_id)

    def _end_round(self, rnd: _Round, ok: bool, why: str) -> None:
        if self._round is not rnd:
            return
        self._round = None
        for r in sorted(rnd.survivors):
            eng = self.engines[r]
            if not eng.process_up or eng.status == "dead":
                continue
            if ok:
                skew = self.knobs.recovery_skew_sec * (zlib.crc32(f"{rnd.request_id}/{r}".encode()) % 1000) / 1000
                asyncio.get_running_loop().call_later(skew, self._recovered, r, eng, rnd.ids.get(r, rnd.request_id),
                                                      (eng.status, eng.fault_info, eng.ft_state))
            elif rnd.retry or (rnd.scale_up and eng.joiner):
                self._retry_failed(rnd, r, why)
            elif self.dialect == "rfc":
                eng.set("unhealthy", fault_info=why, ft_state="failed", dialect=self.dialect)
                eng.ft_error, eng.last_ft_request_id = why, rnd.request_id
            else:
                eng.set("dead", fault_info=RECOVERY_FAILED, dialect=self.dialect)
                eng.ft_error, eng.last_ft_request_id = why, rnd.request_id
        if ok:
            self.members = {r for r in rnd.survivors if self.engines[r].process_up}
            for r in self.members:
                self.engines[r].joiner = False
        elif not rnd.retry:
            self.members -= set(rnd.survivors)
        self._on_change()
