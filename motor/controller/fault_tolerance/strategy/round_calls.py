"""The NodeManager calls of one DP scale-down round, fanned out concurrently per pod and each recorded
in the round's timeline: guard, status, apply, finalize(commit) and finalize(abort), stop_pod. It keeps
which NodeManagers were guarded and which committed, so an abort reaches exactly the ones not
committed. No decisions here: the strategy judges the answers.

The status read that follows a guard, and the first one after an apply, ride on that call
(`then_status`): one call per pod instead of two, recorded in the timeline as the two calls they
stand for. A NodeManager that predates the field answers without the reads; its pod is then read
with a Status call of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from gen.motor.v1 import common_pb2, node_manager_pb2
from motor.controller.clients import NodeManagerClients, PeerCallError
from motor.controller.clock import Clock
from motor.controller.fault_tolerance.evidence import RankRead
from motor.controller.fault_tolerance.topology import RoundPlan
from motor.controller.fault_tolerance.strategy.base import CallTail
from motor.controller.model.placement import PodInfo

log = logging.getLogger(__name__)

T = TypeVar("T")

# strategy.timed_call: (name, target, make, facts, result_facts) -> the call's answer.
TimedCall = Callable[..., Awaitable[Any]]


class RoundFailed(Exception):
    pass


@dataclass(frozen=True)
class StatusRead:
    """What a status fan-out asks: every survivor but `skip`, long-polled while in `wait_while`."""
    skip: frozenset[int] = frozenset()
    wait_while: frozenset[tuple[int, int]] = frozenset()
    settle_sec: float = 0.0


def status_read(targets: tuple[int, ...], read: StatusRead) -> node_manager_pb2.StatusRead:
    """A StatusRead asking what `read` asks of `targets`."""
    return node_manager_pb2.StatusRead(
        endpoint_ids=list(targets), settle_sec=read.settle_sec,
        wait_while=[node_manager_pb2.EngineState(status=s, ft_state=f) for s, f in sorted(read.wait_while)])


def read_error(address: str, resp: Any) -> PeerCallError | None:
    """The failure of the read a Guard or Apply answer carried, as the Status call would have failed."""
    if not resp.then_status.error_code:
        return None
    code = next((c for c in grpc.StatusCode if c.value[0] == resp.then_status.error_code), grpc.StatusCode.UNKNOWN)
    return PeerCallError("status", address, code, resp.then_status.error)


def read_tail(address: str, targets: tuple[int, ...]) -> Callable[[Any], CallTail | None]:
    """The status read a Guard or Apply answer carried, as its own call in the timeline."""
    def tail(resp: Any) -> CallTail | None:
        if not resp.HasField("then_status"):
            return None
        answer, facts = resp.then_status, {"endpoint_ids": list(targets)}
        error = read_error(address, resp)
        if error is not None:
            return CallTail("status", answer.read_sec, facts, str(error))
        return CallTail("status", answer.read_sec, {**facts, "engine_statuses": list(answer.status.engines)})
    return tail


def apply_line(resp: node_manager_pb2.ApplyResponse) -> str:
    return f"dp_store_port={resp.dp_store_port} " + "; ".join(
        f"rank {r.endpoint_id}: HTTP {r.http_status} engine_request_id={r.engine_request_id!r}"
        + ("" if r.accepted else f" message={r.message!r}")
        for r in resp.results
    )


class RoundCalls:
    def __init__(self, nodemanagers: NodeManagerClients, instance_id: int, request_id: str, timed: TimedCall,
                 clock: Clock) -> None:
        self._nodemanagers = nodemanagers
        self._instance_id = instance_id
        self._request_id = request_id
        self._timed = timed
        self._clock = clock
        self._guard_attempted: list[str] = []
        self._committed: set[str] = set()
        # The last apply fan-out's outcomes, and when (this clock) its last apply was answered.
        self.applied: list[node_manager_pb2.EngineApplyResult] = []
        self.applied_mono_sec = 0.0

    async def _gather(self, calls: Iterable[tuple[str, Awaitable[T]]]) -> dict[str, T]:
        """Runs per-NodeManager calls concurrently; the first error fails the round (after all ended)."""
        items = list(calls)
        results = await asyncio.gather(*(c for _, c in items), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for r in errors:
            if isinstance(r, asyncio.CancelledError):
                raise r
        if errors:
            raise RoundFailed("; ".join(str(e) for e in errors))
        return {addr: r for (addr, _), r in zip(items, results)}  # type: ignore[misc]

    async def guard_all(self, plan: RoundPlan, lease_sec: float, then_read: StatusRead | None = None
                        ) -> list[common_pb2.EngineFtStatus]:
        """Guards every participant. With `then_read`, each pod with survivors to read is read once its
        own guard holds, in the guard's call, not after the last guard: the read is evidence only and
        the apply still waits for every guard, so the first status read costs the round no fan-out of
        its own. Returns the entries read (none without `then_read`)."""
        async def one(pod: PodInfo) -> list[common_pb2.EngineFtStatus]:
            client = self._nodemanagers.get(pod.node_manager_address)
            self._guard_attempted.append(pod.node_manager_address)
            targets = self._targets(pod, then_read) if then_read is not None else ()
            then = status_read(targets, then_read) if then_read is not None and targets else None
            resp = await self._timed(
                "guard", pod.node_manager_address,
                lambda: client.guard(self._instance_id, self._request_id, lease_sec, then),
                {"lease_sec": lease_sec, "endpoint_ids": list(pod.status_targets)},
                split=read_tail(pod.node_manager_address, targets),
            )
            if then is None or then_read is None:
                return []
            return await self._carried(pod, targets, then_read, resp)

        by_pod = await self._gather((pod.node_manager_address, one(pod)) for pod in plan.pods)
        return [entry for entries in by_pod.values() for entry in entries]

    async def renew_guards(self, lease_sec: float) -> None:
        """Same request_id again: the NodeManagers extend the lease to the later deadline, so a slow
        round never commits on an expired lease (they refuse that)."""
        addresses = [a for a in dict.fromkeys(self._guard_attempted) if a not in self._committed]
        await self._gather((a, self._timed(
            "guard", a, lambda c=self._nodemanagers.get(a): c.guard(self._instance_id, self._request_id, lease_sec),
            {"lease_sec": lease_sec, "detail": "renew"},
        )) for a in addresses)

    async def status(self, plan: RoundPlan, read: StatusRead) -> list[common_pb2.EngineFtStatus]:
        """The status of every survivor of the plan but those in `read.skip`, one call per pod that has any."""
        by_pod = await self._gather((pod.node_manager_address, self._status_one(pod, read)) for pod in plan.pods)
        return [entry for entries in by_pod.values() for entry in entries]

    @staticmethod
    def _targets(pod: PodInfo, read: StatusRead) -> tuple[int, ...]:
        return tuple(t for t in pod.status_targets if t not in read.skip)

    async def _status_one(self, pod: PodInfo, read: StatusRead) -> list[common_pb2.EngineFtStatus]:
        """One pod's survivors but `read.skip` (a long poll with `wait_while` and `settle_sec`:
        NodeManagerClient.status); nothing to ask, no call."""
        targets = self._targets(pod, read)
        if not targets:
            return []
        address = pod.node_manager_address
        client = self._nodemanagers.get(address)
        entries = await self._timed(
            "status", address,
            lambda: client.status(self._instance_id, self._request_id, targets, read.wait_while, read.settle_sec),
            {"endpoint_ids": list(targets)},
            lambda answered: {"engine_statuses": list(answered)},
        )
        return self._checked(address, targets, entries)

    async def _carried(self, pod: PodInfo, targets: tuple[int, ...], read: StatusRead, resp: Any
                       ) -> list[common_pb2.EngineFtStatus]:
        """The read a Guard or Apply answer carried; a NodeManager that predates the field answered
        without it, and its pod is read with a Status call of its own."""
        if not resp.HasField("then_status"):
            return await self._status_one(pod, read)
        error = read_error(pod.node_manager_address, resp)
        if error is not None:
            raise error
        return self._checked(pod.node_manager_address, targets, resp.then_status.status.engines)

    @staticmethod
    def _checked(address: str, targets: tuple[int, ...], entries: Iterable[common_pb2.EngineFtStatus]
                 ) -> list[common_pb2.EngineFtStatus]:
        entries = list(entries)
        ids = [e.id for e in entries]
        # RFC §4.1 identity contract, checked here too: an entry we did not ask this pod for (or
        # twice) is a protocol failure, never evidence to judge or absorb.
        if sorted(ids) != sorted(set(ids)) or not set(ids) <= set(targets):
            raise RoundFailed(f"protocol error: status from {address} answered endpoint ids {ids}, "
                              f"asked for {list(targets)}")
        return entries

    async def apply(self, plan: RoundPlan, store_port: int,
                    instruction: int = node_manager_pb2.INSTRUCTION_SCALE_DOWN) -> list[node_manager_pb2.EngineApplyResult]:
        """One apply per pod with survivors, all with the same request id, master and store port."""
        await self._apply_all(plan, store_port, instruction, None)
        return self.applied

    async def apply_then_read(self, plan: RoundPlan, store_port: int, read: StatusRead,
                              instruction: int = node_manager_pb2.INSTRUCTION_SCALE_DOWN
                              ) -> list[common_pb2.EngineFtStatus]:
        """The applies (as `apply`; outcomes in `applied`), each carrying its pod's first status read
        of the rebuild, `read`. Returns the entries read."""
        return await self._apply_all(plan, store_port, instruction, read)

    async def _apply_all(self, plan: RoundPlan, store_port: int, instruction: int, read: StatusRead | None
                         ) -> list[common_pb2.EngineFtStatus]:
        self.applied, self.applied_mono_sec = [], self._clock.monotonic()
        calls = [(pod.node_manager_address, self._apply_one(pod, plan, store_port, instruction, read))
                 for pod in plan.pods if pod.status_targets]
        by_pod = await self._gather(calls)
        self.applied = [r for results, _ in by_pod.values() for r in results]
        return [entry for _, entries in by_pod.values() for entry in entries]

    async def _apply_one(self, pod: PodInfo, plan: RoundPlan, store_port: int, instruction: int,
                         read: StatusRead | None
                         ) -> tuple[list[node_manager_pb2.EngineApplyResult], list[common_pb2.EngineFtStatus]]:
        """One pod's apply; its outcomes, and the entries of the read it carried (`read`)."""
        address, targets = pod.node_manager_address, pod.status_targets
        client = self._nodemanagers.get(address)
        facts = {"ranks": list(plan.added or plan.removed_cumulative), "endpoint_ids": list(targets),
                 "dp_master_ip": plan.dp_master_ip}
        # Only a scale-up names added ranks, only a scale-down this round's (peers that predate them
        # take the positional call).
        extra: dict[str, Any] = {"added_dp_ranks": plan.added} if plan.added else {}
        if instruction == node_manager_pb2.INSTRUCTION_SCALE_DOWN and plan.removed_this_round:
            extra["round_removed_dp_ranks"] = plan.removed_this_round
        read_targets = self._targets(pod, read) if read is not None else ()
        if read_targets and read is not None:
            extra["then_status"] = status_read(read_targets, read)
        try:
            resp = await self._timed(
                "apply", address,
                lambda: client.apply(self._instance_id, self._request_id, plan.removed_cumulative, plan.dp_master_ip,
                                     plan.dp_master_rank, targets, store_port, instruction, **extra),
                facts, lambda r: {"apply_results": list(r.results), "dp_store_port": r.dp_store_port,
                                  "outcome": "ok" if r.accepted else "not accepted", "detail": apply_line(r)},
                split=read_tail(address, read_targets),
            )
        except PeerCallError as exc:
            raise RoundFailed(f"apply not accepted: {exc}") from None
        log.info("instance=%d request_id=%s apply to %s %s: %s", self._instance_id, self._request_id, address,
                 "accepted" if resp.accepted else "not accepted", apply_line(resp))
        if not resp.accepted:
            refused = [f"rank {r.endpoint_id} HTTP {r.http_status} {r.message}" for r in resp.results if not r.accepted]
            raise RoundFailed(f"apply not accepted by {address}: {'; '.join(refused)}")
        self.applied_mono_sec = max(self.applied_mono_sec, self._clock.monotonic() - resp.then_status.read_sec)
        if read is None or not read_targets:
            return list(resp.results), []
        return list(resp.results), await self._carried(pod, read_targets, read, resp)

    async def finalize_commit(self, plan: RoundPlan) -> None:
        async def one(pod) -> None:
            client = self._nodemanagers.get(pod.node_manager_address)
            await self._timed(
                "finalize", pod.node_manager_address,
                lambda: client.finalize(self._instance_id, self._request_id, True, pod.retired),
                {"commit": True, "endpoint_ids": list(pod.retired)},
            )
            self._committed.add(pod.node_manager_address)

        await self._gather((pod.node_manager_address, one(pod)) for pod in plan.pods)

    async def abort_uncommitted(self) -> None:
        targets = [a for a in dict.fromkeys(self._guard_attempted) if a not in self._committed]

        async def one(address: str) -> None:
            client = self._nodemanagers.get(address)
            try:
                await self._timed("finalize", address,
                                  lambda: client.finalize(self._instance_id, self._request_id, False, ()),
                                  {"commit": False, "detail": "abort"})
            except PeerCallError as exc:
                # A stale or expired guard is refused by the NodeManager; that is the point of the check.
                log.warning("instance=%d request_id=%s finalize(abort) to %s failed: %s", self._instance_id,
                            self._request_id, address, exc)

        await asyncio.gather(*(one(a) for a in targets))

    async def stop_pods(self, pods: Iterable[PodInfo]) -> None:
        for pod in pods:
            client = self._nodemanagers.get(pod.node_manager_address)
            try:
                # Best effort and sent once: recycling and replacing the pod is the cluster's job.
                await self._timed("stop_pod", pod.node_manager_address,
                                  lambda c=client, p=pod: c.stop_pod(
                                      self._request_id, "every DP rank of the pod is committed dead",
                                      self._instance_id, p.pod_ip),
                                  {"endpoint_ids": list(pod.ranks)})
            except PeerCallError as exc:
                log.warning("instance=%d request_id=%s stop_pod %s failed (not retried): %s", self._instance_id,
                            self._request_id, pod.pod_ip, exc)


# A status fan-out of the round: RoundCalls.status, or the guards followed by their pods' reads.
StatusFanOut = Callable[[RoundPlan, StatusRead], Awaitable[list[common_pb2.EngineFtStatus]]]


async def read_statuses(strategy: Any, plan: RoundPlan, read: StatusRead, fan_out: StatusFanOut,
                        who: str) -> dict[int, common_pb2.EngineFtStatus]:
    """One status fan-out of a strategy (its `deps`, `instance_id`, `last_reads` and
    `last_observed_mono_sec`), by rank; RoundFailed when a rank asked for has no entry (`who`
    names them in the error). A rank's read is dated when it was asked for: a report that comes in
    while the fan-out is out may be newer than that rank's answer, so it is kept for the next decision."""
    deps = strategy.deps
    asked_mono_sec = deps.clock.monotonic()
    entries = await fan_out(plan, read)
    strategy.last_observed_mono_sec = deps.clock.monotonic()
    statuses: dict[int, common_pb2.EngineFtStatus] = {}
    for entry in entries:
        statuses[entry.id] = entry
        strategy.last_reads[entry.id] = RankRead(asked_mono_sec, entry.observed_at_unix_sec)
        deps.runtimes.record_engine_status(strategy.instance_id, entry.id, entry)
    missing = sorted(set(plan.routable_survivors) - read.skip - set(statuses))
    if missing:
        raise RoundFailed(f"status has no entry for {who} {missing}")
    deps.changed(strategy.instance_id)
    return statuses
