"""The pod's FT proxy (RFC §6, "EngineFtService"): guard, status, apply, finalize as plain functions.

The servicer in ``ft_service`` only adapts requests to these calls; every refusal is a typed
``NodeManagerError`` naming the offending value. When the proxy is off, every call raises
``ProxyDisabled`` and nothing else happens.

* guard: ``request_id`` + ``lease_sec`` ∈ (0, 3600] (see ``guard``); freezes self-restart paths.
* status: no guard needed; local, routable, not retired ids; engines read concurrently, each bounded
  by ``engine_request_timeout_sec`` (and the caller's deadline); entries in request order; any
  failure fails the call: unreachable → UNAVAILABLE, timeout → DEADLINE_EXCEEDED, identity or
  malformed → FAILED_PRECONDITION.
* apply: scale_down, retry (the same group rebuilt, no params) or scale_up (joiners re-admitted;
  refused for a dialect without it), checked by ``apply_checks``, by the live guard holder, never
  twice for one request_id; one POST per target the dialect names (each engine, or an instance's
  FT manager once, by the lowest survivor's pod; a busy answer is sent again within the deadline),
  concurrently, same request_id; scale_down's port is the Controller's ``dp_store_port`` or else
  ``dp_store_port_base + len(removed_dp_ranks)`` (the cumulative list grows, so it changes every
  round); accepted only when every target answered 202. Never retried otherwise.
* a guard or an apply may carry the status read that follows it in a round (`then`), read once the
  guard holds or every target accepted: one call where there were two. The read is checked with
  the call, before the guard is taken or anything is sent.
* finalize: by the guard holder only (else stale); commit adds retired ids (local, possibly none)
  and releases the guard (a scale-up's commit makes its re-admitted ranks ordinary instead); abort
  releases the guard and stops the round's joiners.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gen.motor.v1 import node_manager_pb2
from nodemanager.clock import SYSTEM_CLOCK, Clock
from nodemanager.config import NodeManagerConfig
from nodemanager.endpoints import check_endpoint_ids, check_instance
from nodemanager.apply_checks import PodView, check_apply
from nodemanager.dialects import RETRY, SCALE_DOWN, SCALE_UP, FtCommand, UnsupportedInstruction
from nodemanager.engine_answers import EngineStatusEntry
from nodemanager.engine_http import BUSY_RETRY_SEC, ApplyOutcome, EngineHttpClient, apply_while_busy
from nodemanager.errors import FailedPrecondition, InvalidArgument, NodeManagerError, ProxyDisabled
from nodemanager.guard import ForwardedApplies, GuardGrant, GuardState, check_request_id
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.pod_state import PodState
from nodemanager.settle import EngineStatePair, check_reread_cap, check_settle
from nodemanager.status_reads import StatusAsk, StatusReads
from nodemanager.supervisor import ProcessSupervisor

log = logging.getLogger("nodemanager.ft_proxy")


@dataclass(frozen=True)
class ReadAfter:
    """The status read a Guard or Apply call carried, and how long it took (this process's clock);
    `error`: why it failed (no entries then), while what the call did holds regardless."""
    entries: list[EngineStatusEntry]
    read_sec: float
    error: NodeManagerError | None = None


@dataclass(frozen=True)
class ApplyResult:
    accepted: bool
    outcomes: list[ApplyOutcome]
    dp_store_port: int
    # The read the apply carried, when asked and every target accepted.
    read: ReadAfter | None = None


@dataclass(frozen=True)
class FinalizeResult:
    retired_ids: list[int]
    guard_released: bool
    newly_retired: list[int]


class FtProxy:
    def __init__(
        self,
        config: NodeManagerConfig,
        state: PodState,
        supervisor: ProcessSupervisor,
        http: EngineHttpClient,
        guard: GuardState,
        *,
        on_commit: Callable[[list[int], str], None],
        on_taken: Callable[[list[EngineStatusEntry]], object] = lambda _: None,
        on_scale_up_commit: Callable[[list[int], str], None] = lambda ids, rid: None,
        on_abort: Callable[[str], None] = lambda rid: None,
        metrics: NodeManagerMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
        current_term: Callable[[], int] = lambda: 0,
    ) -> None:
        """`current_term`: the highest Controller leader term this pod has seen (the term fence)."""
        self._config = config
        self._clock = clock
        self._state = state
        self._supervisor = supervisor
        self._http = http
        self.guard_state = guard
        self.applies = ForwardedApplies()
        self._on_commit = on_commit
        self._on_taken = on_taken
        self._instance = config.instance_id
        self._metrics = metrics or NodeManagerMetrics()
        self._current_term = current_term
        # Applies held by fault injection; a newer leader taking the guard ends their hold early.
        self._holds: set[asyncio.Event] = set()
        # The cumulative removed ranks of the last committed round, and of each apply sent: an
        # engine that takes only this round's ranks (SGLang's) gets the difference.
        self._committed_removed: frozenset[int] = frozenset()
        self._removed_of: dict[str, tuple[int, ...]] = {}
        # A scale-up's apply: this pod's ranks it re-admits (made ordinary by its commit).
        self._joined_by: dict[str, tuple[int, ...]] = {}
        self._on_scale_up_commit = on_scale_up_commit
        self._on_abort = on_abort
        self._reads = StatusReads(http, lambda i: http.dialect.ft_address(i, supervisor.address), self._instance,
                                  self._metrics, clock)

    def _require_enabled(self) -> None:
        if not self._state.proxy_enabled:
            raise ProxyDisabled()

    def _routable_ids(self, ids: list[int], field: str = "endpoint_ids") -> list[int]:
        # Joiners are read like the others while their scale-up runs (they stay retired otherwise).
        return check_endpoint_ids(
            ids, local=self._supervisor.ids, headless=self._supervisor.headless_ids,
            retired=self._state.retired - self._state.joining, field=field,
        )

    # -- guard ------------------------------------------------------------------------------
    def guard(self, request_id: str, lease_sec: float, instance_id: int, term: int = 0) -> GuardGrant:
        self._require_enabled()
        check_request_id(request_id)
        check_instance(instance_id, self._instance)
        previous_term = self.guard_state.term
        grant = self.guard_state.acquire(request_id, lease_sec, term)
        if grant.replaced_live:
            log.warning("instance=%d request_id=%s guard of leader term %d taken over from request_id=%s of "
                        "deposed term %d", self._instance, request_id, term, grant.replaced_live, previous_term)
            for hold in self._holds:
                hold.set()
        if grant.replaced_expired:
            log.warning("instance=%d request_id=%s guard taken over from expired request_id=%s", self._instance,
                        request_id, grant.replaced_expired)
        log.info("instance=%d request_id=%s guard %s: lease %.1fs (self-restart frozen)", self._instance,
                 request_id, "renewed" if grant.renewed else "granted", grant.lease_remaining_sec)
        return grant

    # -- status -----------------------------------------------------------------------------
    def check_status(self, instance_id: int, endpoint_ids: list[int], wait_while: Iterable[EngineStatePair] = (),
                     settle_sec: float = 0.0, reread_max_sec: float = 0.0) -> StatusAsk:
        """A status read's arguments checked (InvalidArgument naming a bad value), nothing read."""
        self._require_enabled()
        check_instance(instance_id, self._instance)
        return StatusAsk(self._routable_ids(endpoint_ids), check_settle(wait_while, settle_sec), settle_sec,
                         check_reread_cap(reread_max_sec))

    async def status(self, instance_id: int, endpoint_ids: list[int], request_id: str = "",
                     timeout_sec: float | None = None, wait_while: Iterable[EngineStatePair] = (),
                     settle_sec: float = 0.0, taken_as_evidence: bool = False,
                     reread_max_sec: float = 0.0) -> list[EngineStatusEntry]:
        """One read of each engine; with `wait_while` and `settle_sec` a long poll (the Controller
        learns that survivors settled within one re-read, with one call per pod instead of one per
        poll; `reread_max_sec` caps the gap between re-reads: nodemanager.status_reads). With
        `taken_as_evidence` the answer's UNHEALTHY and DEAD entries count as reported (`on_taken`:
        the poller sends no report of them)."""
        ask = self.check_status(instance_id, endpoint_ids, wait_while, settle_sec, reread_max_sec)
        answer = await self._reads.read(ask, request_id, timeout_sec)
        if taken_as_evidence:
            self._on_taken(answer)
        return answer

    async def _read_after(self, ask: StatusAsk | None, request_id: str, timeout_sec: Callable[[], float | None]
                          ) -> ReadAfter | None:
        if ask is None:
            return None
        started = self._clock.monotonic()
        try:
            entries = await self._reads.read(ask, request_id, timeout_sec())
        except NodeManagerError as exc:
            return ReadAfter([], self._clock.monotonic() - started, exc)
        return ReadAfter(entries, self._clock.monotonic() - started)

    async def guard_then_read(self, request_id: str, lease_sec: float, instance_id: int, term: int = 0,
                              then: StatusAsk | None = None, timeout_sec: Callable[[], float | None] = lambda: None
                              ) -> tuple[GuardGrant, ReadAfter | None]:
        """The guard, then (`then`, checked by `check_status` before the guard is taken) a status read
        once it holds: one call where the round made two. `timeout_sec` is asked when the read starts."""
        grant = self.guard(request_id, lease_sec, instance_id, term)
        await self.injected_guard_delay(request_id)
        return grant, await self._read_after(then, request_id, timeout_sec)

    # -- apply ------------------------------------------------------------------------------
    def _pod_view(self) -> PodView:
        return PodView(self._config.dp_size, self._supervisor.ids, self._supervisor.headless_ids,
                       self._state.retired, self._state.joining)

    async def apply(self, *, instance_id: int, request_id: str, instruction: int, removed_dp_ranks: list[int],
                    dp_master_ip: str, dp_master_rank: int, endpoint_ids: list[int],
                    timeout_sec: float | None = None, dp_store_port: int = 0, term: int = 0,
                    added_dp_ranks: Sequence[int] = (), round_removed_dp_ranks: Sequence[int] = (),
                    then: StatusAsk | None = None,
                    read_timeout_sec: Callable[[], float | None] = lambda: None) -> ApplyResult:
        """`then` (checked by `check_status` before the call): a status read once every target
        accepted, answered with the outcomes; `read_timeout_sec` is asked when it starts."""
        self._require_enabled()
        try:
            check_request_id(request_id)
            check_instance(instance_id, self._instance)
            ids = check_apply(self._pod_view(), instruction, list(removed_dp_ranks), dp_master_ip, dp_master_rank,
                              list(endpoint_ids), list(added_dp_ranks), list(round_removed_dp_ranks))
            if instruction == node_manager_pb2.INSTRUCTION_SCALE_UP:
                try:
                    self._http.dialect.check_supported(SCALE_UP)
                except UnsupportedInstruction as exc:
                    raise InvalidArgument(f"instruction INSTRUCTION_SCALE_UP is refused: {exc}") from None
            if dp_store_port and not 1024 <= dp_store_port <= 65535:
                raise InvalidArgument(f"dp_store_port {dp_store_port} is not a port in 1024..65535 (0: the pod's own)")
            self.guard_state.require_live(request_id, "apply")
            self.applies.claim(request_id)
        except NodeManagerError:
            self._metrics.apply_call("refused")
            raise
        # The Controller's choice (the new master's pod, the same on every survivor) wins; without
        # one this pod's own base + the cumulative removed count, the Controller's rule.
        removed = tuple(sorted(removed_dp_ranks))
        if instruction == node_manager_pb2.INSTRUCTION_RETRY:
            # The group is rebuilt in place: no store of a new master, no port.
            command = FtCommand(RETRY, request_id)
        elif instruction == node_manager_pb2.INSTRUCTION_SCALE_UP:
            store_port = dp_store_port or self._config.dp_store_port_base + len(removed_dp_ranks)
            command = FtCommand(SCALE_UP, request_id, removed, dp_master_ip, dp_master_rank, store_port,
                                added_dp_ranks=tuple(sorted(added_dp_ranks)))
            self._joined_by[request_id] = tuple(sorted(set(added_dp_ranks) & set(self._supervisor.ids)))
        else:
            store_port = dp_store_port or self._config.dp_store_port_base + len(removed_dp_ranks)
            # This round's ranks: the Controller's, else (a Controller that predates the field) the
            # cumulative list minus what this pod saw committed, which a restarted pod never saw.
            prior = self._committed_removed if self._committed_removed <= set(removed) else frozenset()
            newly = tuple(sorted(round_removed_dp_ranks)) or tuple(r for r in removed if r not in prior)
            command = FtCommand(SCALE_DOWN, request_id, removed, dp_master_ip, dp_master_rank, store_port, newly)
        self._removed_of[request_id] = removed
        dialect = self._http.dialect
        body = dialect.apply_body(command)
        targets = dialect.apply_targets(ids, command)
        log.info("instance=%d request_id=%s apply %s for endpoints %s, sent to %s (%s): %s", self._instance,
                 request_id, command.instruction, ids, targets, dialect.name or "vllm", body)
        delay = self._config.fault_injection.apply_delay_sec
        if delay:
            log.warning("instance=%d request_id=%s fault injection: holding the apply %gs", self._instance,
                        request_id, delay)
            # The hold stands for an apply slow to reach this pod; a takeover overtakes it.
            taken_over = asyncio.Event()
            self._holds.add(taken_over)
            try:
                async with asyncio.timeout(delay):
                    await taken_over.wait()
            except TimeoutError:
                pass
            finally:
                self._holds.discard(taken_over)
        # Checked again after every wait: a newer leader may have taken the guard meanwhile, and a
        # deposed leader's apply must stop here, before any engine sees it.
        try:
            self.guard_state.require_live(request_id, "apply")
            if term < self._current_term():
                raise FailedPrecondition(f"stale apply: request_id {request_id!r} of leader term {term} is older "
                                         f"than term {self._current_term()} seen since it arrived")
        except NodeManagerError:
            self._metrics.apply_call("refused")
            raise

        async def send(i: int) -> ApplyOutcome:
            addr = dialect.ft_address(i, self._supervisor.address)
            if addr is None:
                return ApplyOutcome(i, False, 0, "", "engine has not been launched (no port yet)", body)
            return await apply_while_busy(self._http, addr, body, timeout_sec, self._clock, lambda o: log.info(
                "instance=%d rank=%d request_id=%s engine busy (%s): sent again in %gs", self._instance, i,
                request_id, o.message, BUSY_RETRY_SEC))

        outcomes = list(await asyncio.gather(*(send(i) for i in targets)))
        for o in outcomes:
            log.log(logging.INFO if o.accepted else logging.ERROR,
                    "instance=%d rank=%d request_id=%s apply %s: HTTP %d engine_request_id=%r %s (%.3fs)",
                    self._instance, o.endpoint_id, request_id, "accepted" if o.accepted else "NOT accepted",
                    o.http_status, o.engine_request_id, o.message, o.elapsed_sec)
        for o in outcomes:
            self._metrics.engine_apply(o.accepted)
        accepted = all(o.accepted for o in outcomes)
        self._metrics.apply_call("accepted" if accepted else "not_accepted")
        read = await self._read_after(then, request_id, read_timeout_sec) if accepted else None
        return ApplyResult(accepted, outcomes, command.dp_store_port, read)

    # -- finalize ---------------------------------------------------------------------------
    async def injected_guard_delay(self, request_id: str) -> None:
        await self._injected_delay(request_id, self._config.fault_injection.guard_delay_sec, "the guard's answer")

    async def injected_finalize_delay(self, request_id: str) -> None:
        await self._injected_delay(request_id, self._config.fault_injection.finalize_delay_sec, "finalize(commit)")

    async def _injected_delay(self, request_id: str, delay_sec: float, what: str) -> None:
        if delay_sec:
            log.warning("instance=%d request_id=%s fault injection: holding %s %gs", self._instance, request_id, what,
                        delay_sec)
            await asyncio.sleep(delay_sec)

    def finalize(self, *, instance_id: int, request_id: str, commit: bool, retired_ids: list[int]) -> FinalizeResult:
        self._require_enabled()
        check_request_id(request_id)
        check_instance(instance_id, self._instance)
        ids = list(retired_ids)
        if commit:
            check_endpoint_ids(ids, local=self._supervisor.ids, field="retired_ids", allow_empty=True,
                               allow_headless=True, allow_retired=True)
        # A commit needs the live lease (an expired one may already have let another round in); an
        # abort only ends what its holder started, so an expired, unreplaced lease may still abort.
        if commit:
            self.guard_state.require_live(request_id, "finalize")
        else:
            self.guard_state.require_holder(request_id, "finalize")
        if not commit:
            if ids:
                log.warning("instance=%d request_id=%s finalize(abort) ignores retired_ids %s", self._instance,
                            request_id, ids)
            self.guard_state.release(request_id)
            self._removed_of.pop(request_id, None)
            self._joined_by.pop(request_id, None)
            self._on_abort(request_id)  # the round's joiners, if any, are stopped
            self._metrics.finalizes.labels("abort").inc()
            log.info("instance=%d request_id=%s finalize(abort): guard released", self._instance, request_id)
            return FinalizeResult(sorted(self._state.retired), True, [])
        joined = self._joined_by.pop(request_id, None)
        if joined is not None:
            # A scale-up: what is still removed after it is the whole cumulative list.
            self._committed_removed = frozenset(self._removed_of.pop(request_id, ()))
            self.guard_state.release(request_id)
            back = self._state.unretire(joined)
            self._metrics.finalizes.labels("commit").inc()
            log.info("instance=%d request_id=%s finalize(commit) of a scale-up: ranks %s serve again; retired %s; "
                     "guard released", self._instance, request_id, back, sorted(self._state.retired))
            self._on_scale_up_commit(back, request_id)
            return FinalizeResult(sorted(self._state.retired), True, [])
        new = self._state.retire(ids)
        self._committed_removed = frozenset(self._removed_of.pop(request_id, ())) | self._committed_removed
        self.guard_state.release(request_id)
        self._metrics.finalizes.labels("commit").inc()
        log.info("instance=%d request_id=%s finalize(commit): retired %s (newly %s), cumulative %s; guard released",
                 self._instance, request_id, sorted(ids), new, sorted(self._state.retired))
        self._on_commit(new, request_id)  # also with none retired here: this pod's survivors are re-armed
        return FinalizeResult(sorted(self._state.retired), True, new)
