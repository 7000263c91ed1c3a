"""Fault-tolerance state of one engine rank and the FT ``apply`` rules (pure, no I/O).

Status model (vLLM fault-tolerance framework, external-LB mode, one entry per process):

* ``status``: ``healthy`` | ``unhealthy`` (a collective failed / the DP domain is broken; this rank
  can take an ``apply``) | ``dead`` (the executor is gone; terminal for this process).
* ``ft_state``: absent | ``recovering`` (an accepted apply is running) | ``failed`` (the last apply
  was rejected or did not complete; ``ft_error`` says why).
* ``last_ft_request_id``: the request id of the last apply that was accepted, rejected or completed.

Choices where the upstream contract is silent (callers rely on these):

* An apply is answered 202 as soon as its body is well-formed; everything else is decided at once
  and is visible in status before the 202 is sent: a rejected apply sets ``ft_state: failed``,
  ``ft_error`` and ``last_ft_request_id`` without touching the DP group.
* An apply on a HEALTHY rank is rejected that way too and the rank stays ``healthy``, so status
  reads (``healthy``, ``failed``). ``failed`` is set on purpose: a poller that only looked for
  (``healthy``, no ``ft_state``) would otherwise take the rejection for a completed scale-down.
* A new fault (healthy -> unhealthy) clears a stale ``ft_state: failed``/``ft_error`` so the rank
  reads (``unhealthy``, –), i.e. apply-ready, for the next round.
* An apply whose request_id equals the running recovery, or the last request that already ended
  (success or failure), is a duplicate delivery: acknowledged and ignored, status untouched.
* An apply with a different request_id while a recovery runs is rejected but status is left to
  the running recovery (overwriting it would misreport that recovery); the rejection is logged.
* ``removed_dp_ranks`` is cumulative: it must include every rank removed by earlier rounds.
* Unknown keys in ``params`` are ignored (logged by the caller), not rejected.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from motor.sim.placement import ExpertPlacement, PlacementError, replace_after_scale_down

SCHEMA_VERSION = 1
MAX_REQUEST_ID_CHARS = 256


class EngineStatus(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DEAD = "dead"


class FtState(StrEnum):
    RECOVERING = "recovering"
    FAILED = "failed"


class Instruction(StrEnum):
    SCALE_DOWN = "scale_down"
    RETRY = "retry"


KNOWN_PARAMS: dict[Instruction, frozenset[str]] = {
    Instruction.SCALE_DOWN: frozenset({"removed_dp_ranks", "dp_master_ip", "dp_store_port"}),
    Instruction.RETRY: frozenset({"dp_master_ip", "dp_store_port"}),
}


class ApplyBodyError(ValueError):
    """A malformed apply body (HTTP 400); the message names the bad value."""


@dataclass(frozen=True)
class ApplyRequest:
    instruction: Instruction
    request_id: str
    params: dict[str, Any]

    def unknown_params(self) -> list[str]:
        return sorted(set(self.params) - KNOWN_PARAMS[self.instruction])


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_apply_body(raw: bytes | str) -> ApplyRequest:
    """Parse ``{"instruction", "request_id", "params"}`` or raise ApplyBodyError."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        snippet = raw[:60] if isinstance(raw, str) else raw[:60].decode("utf-8", "replace")
        raise ApplyBodyError(f"body is not valid JSON ({exc}): {snippet!r}") from None
    if not isinstance(body, dict):
        raise ApplyBodyError(f"body must be a JSON object, got {type(body).__name__} {_short(body)}")
    if "instruction" not in body:
        raise ApplyBodyError("missing 'instruction'; expected one of: " + ", ".join(i.value for i in Instruction))
    raw_instruction = body["instruction"]
    if not isinstance(raw_instruction, str) or raw_instruction not in {i.value for i in Instruction}:
        raise ApplyBodyError(
            f"invalid instruction {_short(raw_instruction)}; expected one of: "
            + ", ".join(i.value for i in Instruction)
        )
    if "request_id" not in body:
        raise ApplyBodyError("missing 'request_id'")
    request_id = body["request_id"]
    if not isinstance(request_id, str):
        raise ApplyBodyError(f"request_id must be a string, got {type(request_id).__name__} {_short(request_id)}")
    if not request_id.strip():
        raise ApplyBodyError(f"request_id must not be blank, got {request_id!r}")
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        raise ApplyBodyError(f"request_id is {len(request_id)} characters, more than {MAX_REQUEST_ID_CHARS}")
    if any(ch in request_id for ch in "\r\n\t\0"):
        raise ApplyBodyError(f"request_id contains control characters: {request_id!r}")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise ApplyBodyError(f"params must be a JSON object, got {type(params).__name__} {_short(params)}")
    return ApplyRequest(instruction=Instruction(raw_instruction), request_id=request_id, params=params)


@dataclass
class FtStatus:
    """Mutable FT status of one rank; every transition is one method."""

    rank: int
    status: EngineStatus = EngineStatus.HEALTHY
    fault_info: str | None = None
    mask: list[int] | None = None
    ft_state: FtState | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None

    def to_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": self.rank, "status": self.status.value}
        if self.fault_info is not None:
            entry["fault_info"] = self.fault_info
        if self.mask is not None:
            entry["mask"] = list(self.mask)
        if self.ft_state is not None:
            entry["ft_state"] = self.ft_state.value
        if self.last_ft_request_id is not None:
            entry["last_ft_request_id"] = self.last_ft_request_id
        if self.ft_error is not None:
            entry["ft_error"] = self.ft_error
        return entry

    @property
    def serving(self) -> bool:
        return self.status is EngineStatus.HEALTHY and self.ft_state is not FtState.RECOVERING

    def mark_fault(self, info: str, mask: Sequence[int] | None = None) -> bool:
        """A collective/communication fault; returns True if the status changed."""
        if self.status is not EngineStatus.HEALTHY or self.ft_state is FtState.RECOVERING:
            return False
        self.status = EngineStatus.UNHEALTHY
        self.fault_info = info
        self.mask = sorted(mask) if mask is not None else None
        self.ft_state = None
        self.ft_error = None
        return True

    def set_mask(self, mask: Sequence[int]) -> bool:
        if self.status is not EngineStatus.UNHEALTHY or self.ft_state is FtState.RECOVERING:
            return False
        self.mask = sorted(mask)
        return True

    def mark_dead(self, info: str) -> None:
        if self.status is EngineStatus.DEAD:
            return
        self.status = EngineStatus.DEAD
        self.fault_info = info
        if self.ft_state is FtState.RECOVERING:
            self.ft_state = FtState.FAILED
            self.ft_error = f"executor died during recovery {self.last_ft_request_id}: {info}"

    def reject(self, request_id: str, error: str) -> None:
        self.ft_state = FtState.FAILED
        self.ft_error = error
        self.last_ft_request_id = request_id

    def begin_recovery(self, request_id: str) -> None:
        self.ft_state = FtState.RECOVERING
        self.ft_error = None
        self.last_ft_request_id = request_id

    def finish_recovery(self, request_id: str) -> None:
        self.status = EngineStatus.HEALTHY
        self.fault_info = None
        self.mask = None
        self.ft_state = None
        self.ft_error = None
        self.last_ft_request_id = request_id

    def fail_recovery(self, request_id: str, error: str) -> None:
        if self.status is not EngineStatus.DEAD:
            self.status = EngineStatus.UNHEALTHY
        self.ft_state = FtState.FAILED
        self.ft_error = error
        self.last_ft_request_id = request_id


@dataclass(frozen=True)
class GroupContext:
    """What a rank knows about its DP group when an apply arrives."""

    rank: int
    dp_size: int
    members: tuple[int, ...]  # current members, original ranks, sorted
    removed: tuple[int, ...]  # cumulative removed original ranks, sorted
    master_ip: str
    master_port: int

    @property
    def master_rank(self) -> int:
        return min(self.members)


@dataclass(frozen=True)
class RecoveryPlan:
    request_id: str
    instruction: Instruction
    members: tuple[int, ...]  # new members (original ranks), sorted; new dense rank = index
    removed: tuple[int, ...]  # cumulative removed original ranks, sorted
    newly_removed: tuple[int, ...]
    master_ip: str
    master_port: int
    placement: ExpertPlacement

    @property
    def master_rank(self) -> int:
        return self.members[0]


@dataclass(frozen=True)
class ApplyDecision:
    """``plan`` set: accept. ``rejection`` set: record in status. ``ignored`` set: log only."""

    plan: RecoveryPlan | None = None
    rejection: str | None = None
    ignored: str | None = None
    warnings: list[str] = field(default_factory=list)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_master(params: dict[str, Any], required: bool) -> tuple[str, int] | str | None:
    """(ip, port), an error string, or None when absent and optional."""
    has_ip = "dp_master_ip" in params
    has_port = "dp_store_port" in params
    if not has_ip and not has_port and not required:
        return None
    if not has_ip:
        return "params.dp_master_ip is required"
    if not has_port:
        return "params.dp_store_port is required"
    ip = params["dp_master_ip"]
    if not isinstance(ip, str):
        return f"params.dp_master_ip must be a string IP address, got {_short(ip)}"
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return f"params.dp_master_ip {ip!r} is not an IP address"
    port = params["dp_store_port"]
    if not _is_int(port) or not 1 <= port <= 65535:
        return f"params.dp_store_port must be an integer in [1, 65535], got {_short(port)}"
    return ip, port


def decide_apply(
    status: FtStatus, req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement
) -> ApplyDecision:
    """Pure decision for an accepted (well-formed) apply body; see the module docstring."""
    warnings = [f"ignoring unknown params {req.unknown_params()}"] if req.unknown_params() else []
    if status.ft_state is FtState.RECOVERING:
        if req.request_id == status.last_ft_request_id:
            return ApplyDecision(ignored=f"duplicate apply for running recovery {req.request_id}")
        return ApplyDecision(
            ignored=f"recovery {status.last_ft_request_id} is already running; "
            f"apply {req.request_id} rejected, status left to the running recovery"
        )
    if req.request_id == status.last_ft_request_id:
        return ApplyDecision(ignored=f"duplicate apply {req.request_id} (already ended, status unchanged)")
    if status.status is EngineStatus.DEAD:
        return ApplyDecision(rejection=f"rank {ctx.rank} is dead; {req.instruction.value} needs an unhealthy engine")
    if status.status is EngineStatus.HEALTHY:
        return ApplyDecision(
            rejection=f"rank {ctx.rank} is healthy; {req.instruction.value} is only accepted "
            "while the engine is unhealthy"
        )
    if req.instruction is Instruction.RETRY:
        return _decide_retry(req, ctx, placement, warnings)
    return _decide_scale_down(req, ctx, placement, warnings)


def _decide_retry(
    req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement, warnings: list[str]
) -> ApplyDecision:
    master = _parse_master(req.params, required=False)
    if isinstance(master, str):
        return ApplyDecision(rejection=master)
    ip, port = master if master is not None else (ctx.master_ip, ctx.master_port)
    plan = RecoveryPlan(
        request_id=req.request_id,
        instruction=req.instruction,
        members=ctx.members,
        removed=ctx.removed,
        newly_removed=(),
        master_ip=ip,
        master_port=port,
        placement=placement,
    )
    return ApplyDecision(plan=plan, warnings=warnings)


def _decide_scale_down(
    req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement, warnings: list[str]
) -> ApplyDecision:
    params = req.params
    if "removed_dp_ranks" not in params:
        return ApplyDecision(rejection="params.removed_dp_ranks is required")
    raw = params["removed_dp_ranks"]
    if not isinstance(raw, list):
        return ApplyDecision(rejection=f"params.removed_dp_ranks must be a list of ranks, got {_short(raw)}")
    if not raw:
        return ApplyDecision(rejection="params.removed_dp_ranks is empty")
    bad = [r for r in raw if not _is_int(r) or not 0 <= r < ctx.dp_size]
    if bad:
        return ApplyDecision(
            rejection=f"params.removed_dp_ranks has invalid ranks {_short(bad)} "
            f"(original dp ranks are 0..{ctx.dp_size - 1})"
        )
    if len(set(raw)) != len(raw):
        dups = sorted({r for r in raw if raw.count(r) > 1})
        return ApplyDecision(rejection=f"params.removed_dp_ranks {raw} repeats ranks {dups}")
    removed = set(raw)
    survivors = tuple(r for r in ctx.members if r not in removed)
    if not survivors:
        return ApplyDecision(rejection=f"removed_dp_ranks {sorted(removed)} would remove every rank of {list(ctx.members)}")
    if ctx.rank in removed:
        return ApplyDecision(rejection=f"removed_dp_ranks {sorted(removed)} names this engine's own rank {ctx.rank}")
    forgotten = sorted(set(ctx.removed) - removed)
    if forgotten:
        return ApplyDecision(
            rejection=f"removed_dp_ranks {sorted(removed)} is not cumulative: it omits ranks {forgotten} "
            "removed by earlier rounds"
        )
    newly_removed = tuple(sorted(removed - set(ctx.removed)))
    if not newly_removed:
        return ApplyDecision(
            rejection=f"removed_dp_ranks {sorted(removed)} names no newly removed rank "
            f"(already removed: {list(ctx.removed)})"
        )
    master = _parse_master(params, required=True)
    if isinstance(master, str):
        return ApplyDecision(rejection=master)
    assert master is not None
    ip, port = master
    if ctx.master_rank in newly_removed and (ip, port) == (ctx.master_ip, ctx.master_port):
        return ApplyDecision(
            rejection=f"current dp master rank {ctx.master_rank} is removed but the new master "
            f"{ip}:{port} is the old one; a new dp_master_ip/dp_store_port is required"
        )
    try:
        new_placement = replace_after_scale_down(placement, survivors)
    except PlacementError as exc:
        return ApplyDecision(rejection=str(exc))
    plan = RecoveryPlan(
        request_id=req.request_id,
        instruction=req.instruction,
        members=survivors,
        removed=tuple(sorted(removed)),
        newly_removed=newly_removed,
        master_ip=ip,
        master_port=port,
        placement=new_placement,
    )
    return ApplyDecision(plan=plan, warnings=warnings)
