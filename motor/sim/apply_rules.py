"""The FT ``apply`` rules: what a rank does with a well-formed command (pure, no I/O).

* An apply is answered once its body is well-formed (``apply_body``); everything else is decided
  here at once and is visible in status before the answer goes out; a rejected apply is recorded
  in status without touching the DP group.
* Commands run only while the rank is ``unhealthy``. Otherwise (healthy, diagnosing, dead) they are
  rejected; the vLLM dialect answers that with HTTP 400 (``ApplyDecision.not_ready``), the RFC
  dialect with its 202 and ``ft_state: failed``.
* An apply whose request_id equals the running recovery, or the last request that already ended
  (success or failure), is a duplicate delivery: acknowledged and ignored, status untouched.
* An apply with a different request_id while a recovery runs is rejected but status is left to
  the running recovery (overwriting it would misreport that recovery); the rejection is logged.
* ``scale_down`` (PR #46370's engine rules): ``removed_dp_ranks`` are original ranks; refused when
  empty, out of range, repeated, naming this engine's own rank, removing every rank, naming no newly
  removed rank, or with dp_size 1. The DP store master is the lowest alive (current member) rank;
  ``dp_master_ip``/``dp_store_port`` are required when it is removed. The vLLM dialect allows the
  list to omit earlier rounds' ranks (they stay removed) and, when the master survives, reuses its
  store if no new address is given; the RFC dialect requires the cumulative list and an address.
  A named address always gets a fresh store: the same port as the round before cannot be bound.
* ``scale_up`` (re-admitting removed ranks into a healthy group): ``scale_up_rules``.
* Unknown keys in ``params`` are ignored (logged by the caller), not rejected.
"""

from __future__ import annotations

from motor.sim.apply_body import KNOWN_PARAMS, ApplyParams, ApplyRequest, Instruction, ParamsError, validate_params
from motor.sim.apply_plan import ApplyDecision, GroupContext, RecoveryPlan
from motor.sim.ft_state import EngineStatus, FtStatus
from motor.sim.placement import ExpertPlacement, PlacementError, replace_after_scale_down
from motor.sim.scale_up_rules import decide_scale_up

__all__ = ["ApplyDecision", "GroupContext", "RecoveryPlan", "decide_apply"]


def _master(params: ApplyParams, required: bool, why: str = "") -> tuple[str, int] | str | None:
    """(ip, port), an error string, or None when both are absent and optional."""
    ip, port = params.dp_master_ip, params.dp_store_port
    if ip is None and port is None and not required:
        return None
    if ip is None:
        return f"params.dp_master_ip is required{why}"
    if port is None:
        return f"params.dp_store_port is required{why}"
    return ip, port


def _typed_params(req: ApplyRequest, ctx: GroupContext) -> ApplyParams | str:
    """The instruction's own params, typed; other keys are only warned about (see unknown_params)."""
    own = {k: v for k, v in req.params.items() if k in KNOWN_PARAMS[req.instruction]}
    try:
        return validate_params(own, ctx.dp_size)
    except ParamsError as exc:
        return str(exc)


def decide_apply(
    status: FtStatus, req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement
) -> ApplyDecision:
    """Pure decision for an accepted (well-formed) apply body; see the module docstring."""
    warnings = [f"ignoring unknown params {req.unknown_params()}"] if req.unknown_params() else []
    if status.recovering_id is not None:
        if req.request_id == status.recovering_id:
            return ApplyDecision(ignored=f"duplicate apply for running recovery {req.request_id}")
        return ApplyDecision(
            ignored=f"recovery {status.recovering_id} is already running; "
            f"apply {req.request_id} rejected, status left to the running recovery"
        )
    if req.request_id == status.handled_id:
        return ApplyDecision(ignored=f"duplicate apply {req.request_id} (already ended, status unchanged)")
    if req.instruction is Instruction.SCALE_UP:
        return decide_scale_up(status, req, ctx, placement, warnings)
    if status.status is EngineStatus.DEAD:
        return ApplyDecision(
            rejection=f"rank {ctx.rank} is dead; {req.instruction.value} needs an unhealthy engine", not_ready=True
        )
    if status.status is not EngineStatus.UNHEALTHY:
        return ApplyDecision(
            rejection=f"rank {ctx.rank} is {status.status.value}; {req.instruction.value} is only accepted "
            "while the engine is unhealthy",
            not_ready=True,
        )
    if not ctx.in_group:
        return ApplyDecision(rejection=f"rank {ctx.rank} is in no DP group (started to join one); "
                             f"{req.instruction.value} needs a group, only scale_up admits this rank")
    if req.instruction is Instruction.RETRY:
        return _decide_retry(req, ctx, placement, warnings)
    return _decide_scale_down(req, ctx, placement, warnings, vllm=status.vllm)


def _decide_retry(
    req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement, warnings: list[str]
) -> ApplyDecision:
    params = _typed_params(req, ctx)
    if isinstance(params, str):
        return ApplyDecision(rejection=params)
    master = _master(params, required=False)
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
    req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement, warnings: list[str], *, vllm: bool
) -> ApplyDecision:
    if ctx.dp_size == 1:
        return ApplyDecision(rejection="scale_down needs data parallelism; this engine runs with dp_size 1")
    if "removed_dp_ranks" not in req.params:
        return ApplyDecision(rejection="params.removed_dp_ranks is required")
    params = _typed_params(req, ctx)
    if isinstance(params, str):
        return ApplyDecision(rejection=params)
    raw = params.removed_dp_ranks or []
    if len(set(raw)) != len(raw):
        dups = sorted({r for r in raw if raw.count(r) > 1})
        return ApplyDecision(rejection=f"params.removed_dp_ranks {raw} repeats ranks {dups}")
    # vLLM keeps earlier rounds' ranks removed whether or not the list repeats them.
    removed = (set(raw) | set(ctx.removed)) if vllm else set(raw)
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
            rejection=f"removed_dp_ranks {sorted(raw)} names no newly removed rank "
            f"(already removed: {list(ctx.removed)})"
        )
    master_removed = ctx.master_rank in newly_removed
    why = f" (dp master rank {ctx.master_rank}, the lowest alive rank, is removed)" if master_removed else ""
    master = _master(params, required=master_removed or not vllm, why=why)
    if isinstance(master, str):
        return ApplyDecision(rejection=master)
    # The master survives: its store serves the round unless a new address is given.
    ip, port = master if master is not None else (ctx.master_ip, ctx.master_port)
    if master_removed and (ip, port) == (ctx.master_ip, ctx.master_port):
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
        new_store=master is not None,
    )
    return ApplyDecision(plan=plan, warnings=warnings)
