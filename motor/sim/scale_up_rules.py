"""The ``scale_up`` rules: re-admitting removed original ranks into a healthy group (pure, no I/O).

Every participant, the survivors (healthy, serving, in the group) and the joiners (a process
started with ``--join`` for an added rank: healthy, in no group), gets the same body::

    {"added_dp_ranks": [...], "removed_dp_ranks": [ranks still removed after the round, maybe []],
     "dp_master_ip": ..., "dp_store_port": ...}

and computes the grown group identically: original ranks ``0..dp_size-1`` minus
``removed_dp_ranks``, dense ranks in ascending original-rank order, the lowest one serving a fresh
TCPStore at ``dp_master_ip:dp_store_port``. Experts are re-placed over the grown group.

Unlike ``scale_down``, every refusal is an HTTP 400 naming the value and leaves the status
untouched (``ApplyDecision.http_refusal``), so the rank stays ready for a corrected round. Refused:
the rank is not ``healthy`` (or a recovery runs), dp_size 1, ``added_dp_ranks`` missing, empty,
out of range or repeated, ``removed_dp_ranks`` missing, out of range or repeated, both lists naming
one rank, ``dp_master_ip``/``dp_store_port`` missing; a survivor named in the added list, an added
rank that is in the survivor's group now, a removed list that names a member or omits a rank that
is removed and not added (the survivor's group plus the added ranks must be the grown group), the
survivor's current store address given as the fresh one; a joiner whose own rank is not added.
"""

from __future__ import annotations

from motor.sim.apply_body import KNOWN_PARAMS, ApplyRequest, Instruction, ParamsError, validate_scale_up_params
from motor.sim.apply_plan import ApplyDecision, GroupContext, RecoveryPlan
from motor.sim.ft_state import EngineStatus, FtStatus
from motor.sim.placement import ExpertPlacement, PlacementError, replace_after_scale_up


def _repeated(name: str, ranks: list[int]) -> str | None:
    dups = sorted({r for r in ranks if ranks.count(r) > 1})
    return f"params.{name} {ranks} repeats ranks {dups}" if dups else None


def _survivor_refusal(ctx: GroupContext, added: list[int], removed: list[int], grown: tuple[int, ...],
                      store: tuple[str, int]) -> str | None:
    if ctx.rank in added:
        return f"params.added_dp_ranks {added} names this engine's own rank {ctx.rank}, which is in the DP group"
    present = sorted(set(added) & set(ctx.members))
    if present:
        return (f"params.added_dp_ranks {added} names ranks {present} that are in the DP group now "
                f"(members {list(ctx.members)})")
    if ctx.rank in removed:
        return f"params.removed_dp_ranks {removed} names this engine's own rank {ctx.rank}"
    members_removed = sorted(set(removed) & set(ctx.members))
    if members_removed:
        return (f"params.removed_dp_ranks {removed} names ranks {members_removed} of the DP group "
                f"(members {list(ctx.members)}): scale_up removes no rank")
    unnamed = sorted(set(grown) - set(ctx.members) - set(added))
    if unnamed:
        return (f"params.removed_dp_ranks {removed} omits ranks {unnamed}, which are removed and not in "
                f"params.added_dp_ranks {added}")
    if store == (ctx.master_ip, ctx.master_port):
        return (f"dp_master_ip:dp_store_port {store[0]}:{store[1]} is the current group's DP store; the grown "
                "group forms through a fresh one")
    return None


def decide_scale_up(status: FtStatus, req: ApplyRequest, ctx: GroupContext, placement: ExpertPlacement,
                    warnings: list[str]) -> ApplyDecision:
    """Accept (a plan) or refuse (HTTP 400, status untouched); duplicates were sorted out before."""
    if ctx.dp_size == 1:
        return ApplyDecision(http_refusal="scale_up needs data parallelism; this engine runs with dp_size 1")
    if status.status is not EngineStatus.HEALTHY or status.recovering_id is not None:
        return ApplyDecision(http_refusal=f"rank {ctx.rank} is {status.status.value}; scale_up is only accepted "
                             "while the engine is healthy")
    for key in ("added_dp_ranks", "removed_dp_ranks"):
        if key not in req.params:
            return ApplyDecision(http_refusal=f"params.{key} is required")
    own = {k: v for k, v in req.params.items() if k in KNOWN_PARAMS[Instruction.SCALE_UP]}
    try:
        params = validate_scale_up_params(own, ctx.dp_size)
    except ParamsError as exc:
        return ApplyDecision(http_refusal=str(exc))
    added, removed = list(params.added_dp_ranks or []), list(params.removed_dp_ranks or [])
    repeated = _repeated("added_dp_ranks", added) or _repeated("removed_dp_ranks", removed)
    if repeated:
        return ApplyDecision(http_refusal=repeated)
    both = sorted(set(added) & set(removed))
    if both:
        return ApplyDecision(http_refusal=f"params.added_dp_ranks {added} and params.removed_dp_ranks {removed} "
                             f"both name ranks {both}")
    for key, value in (("dp_master_ip", params.dp_master_ip), ("dp_store_port", params.dp_store_port)):
        if value is None:
            return ApplyDecision(http_refusal=f"params.{key} is required (the grown group's fresh DP store)")
    assert params.dp_master_ip is not None and params.dp_store_port is not None
    store = (params.dp_master_ip, params.dp_store_port)
    grown = tuple(r for r in range(ctx.dp_size) if r not in set(removed))
    if ctx.in_group:
        refusal = _survivor_refusal(ctx, added, removed, grown, store)
    elif ctx.rank not in added:
        refusal = (f"params.added_dp_ranks {added} does not name this engine's own rank {ctx.rank}, "
                   "which waits to join a DP group")
    else:
        refusal = None
    if refusal is not None:
        return ApplyDecision(http_refusal=refusal)
    try:
        new_placement = replace_after_scale_up(placement, grown)
    except PlacementError as exc:
        return ApplyDecision(http_refusal=str(exc))
    plan = RecoveryPlan(
        request_id=req.request_id, instruction=Instruction.SCALE_UP, members=grown, removed=tuple(sorted(removed)),
        newly_removed=(), master_ip=store[0], master_port=store[1], placement=new_placement, new_store=True,
        added=tuple(sorted(added)), pause_group=ctx.in_group,
    )
    return ApplyDecision(plan=plan, warnings=warnings)
