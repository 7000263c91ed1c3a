"""An elastic scale-up round's plan and how it judges each participant (docs/engine-protocol-scale-up.md).
Pure.

The round re-admits `added` (ranks committed dead) into the running group: the participants are
the survivors (serving) and the joiners (the added ranks, started again in join mode); the grown
group is every original rank but what stays removed, its master the lowest rank of it.

Judgement (contract §3): before the apply a participant is ready only on (healthy, -); anything
else fails the round (a fault under way is the planned restoration's to absorb). After the apply
it is done on (healthy, -); it is waited out on (unhealthy, -), (unhealthy, recovering), (healthy,
recovering) and diagnosing; an engine that names this round's request id with an ft_error failed
it, and dead, failed or unknown fail it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gen.motor.v1 import common_pb2
from motor.controller.fault_tolerance.engine_states import Verdict
from motor.controller.fault_tolerance.topology import PodPlan, RoundPlan, TopologyError
from motor.controller.model.placement import EndpointInfo, PodInfo

_HEALTH = common_pb2.EngineHealth
_FT = common_pb2.FtState

# Waited out at the NodeManager (the status long poll) after the apply: the verdicts' WAIT pairs.
SCALE_UP_WAIT_STATES: frozenset[tuple[int, int]] = frozenset({
    (_HEALTH.ENGINE_HEALTH_UNHEALTHY, _FT.FT_STATE_UNSPECIFIED),
    (_HEALTH.ENGINE_HEALTH_UNHEALTHY, _FT.FT_STATE_RECOVERING),
    (_HEALTH.ENGINE_HEALTH_HEALTHY, _FT.FT_STATE_RECOVERING),
    (_HEALTH.ENGINE_HEALTH_DIAGNOSING, _FT.FT_STATE_UNSPECIFIED),
})


def scale_up_readiness(s: common_pb2.EngineFtStatus) -> Verdict:
    """Before the apply: ready (DONE) only on (healthy, -), every other state FAIL."""
    if s.status == _HEALTH.ENGINE_HEALTH_HEALTHY and s.ft_state == _FT.FT_STATE_UNSPECIFIED:
        return Verdict.DONE
    return Verdict.FAIL


def scale_up_outcome(s: common_pb2.EngineFtStatus, request_id: str) -> Verdict:
    """After the apply: DONE on (healthy, -), WAIT on SCALE_UP_WAIT_STATES unless the engine names
    this round with an ft_error (it refused or failed the round), FAIL otherwise."""
    if s.status == _HEALTH.ENGINE_HEALTH_HEALTHY and s.ft_state == _FT.FT_STATE_UNSPECIFIED:
        return Verdict.DONE
    if s.ft_error and s.last_ft_request_id == request_id:
        return Verdict.FAIL
    if (s.status, s.ft_state) in SCALE_UP_WAIT_STATES:
        return Verdict.WAIT
    return Verdict.FAIL


def plan_scale_up(*, original_dp_ranks: Iterable[int], dead_committed: Iterable[int], added: Iterable[int],
                  endpoints: Mapping[int, EndpointInfo], pods: Iterable[PodInfo]) -> RoundPlan:
    """Participants (pods with a survivor or a joiner), their targets and the grown group's master,
    or TopologyError naming what is wrong."""
    original, committed, adding = set(original_dp_ranks), set(dead_committed), set(added)
    if not adding:
        raise TopologyError("the scale-up adds no rank")
    if not adding <= committed:
        raise TopologyError(f"ranks {sorted(adding - committed)} are not committed dead: only removed ranks are "
                            f"re-admitted (dead_committed {sorted(committed)})")
    if not committed <= original:
        raise TopologyError(f"dead_committed {sorted(committed - original)} are not original ranks")
    removed_after = committed - adding
    grown = sorted(original - removed_after)
    missing = sorted(r for r in grown if r not in endpoints)
    if missing:
        raise TopologyError(f"no endpoint known for ranks {missing}")
    headless = sorted(r for r in adding if endpoints[r].headless)
    if headless:
        raise TopologyError(f"ranks {headless} are headless: a joiner needs the FT API")
    owner: dict[int, PodInfo] = {}
    by_address: dict[str, PodInfo] = {}
    pod_list = sorted(pods, key=lambda p: p.pod_ip)
    for pod in pod_list:
        if not pod.node_manager_address:
            raise TopologyError(f"pod {pod.pod_ip} has no NodeManager address")
        other = by_address.setdefault(pod.node_manager_address, pod)
        if other is not pod:
            raise TopologyError(f"pods {other.pod_ip} and {pod.pod_ip} share NodeManager address "
                                f"{pod.node_manager_address}")
        for rank in pod.ranks:
            if rank in owner:
                raise TopologyError(f"rank {rank} is claimed by pods {owner[rank].pod_ip} and {pod.pod_ip}")
            owner[rank] = pod
    orphan = sorted(r for r in grown if r not in owner)
    if orphan:
        raise TopologyError(f"no pod hosts ranks {orphan}")
    survivors = [r for r in grown if r not in adding]
    if not survivors:
        raise TopologyError("no survivor serves: nothing to join (a restoration rebuilds the instance)")
    plans = []
    for pod in pod_list:
        members = sorted(r for r in pod.ranks if r in grown)
        if not members:
            continue
        plans.append(PodPlan(pod_ip=pod.pod_ip, node_manager_address=pod.node_manager_address,
                             status_targets=tuple(r for r in members if not endpoints[r].headless), retired=()))
    master = grown[0]
    return RoundPlan(removed_cumulative=tuple(sorted(removed_after)), removed_this_round=(), survivors=tuple(grown),
                     dp_master_rank=master, dp_master_ip=endpoints[master].ip, pods=tuple(plans),
                     added=tuple(sorted(adding)))


def joiners_by_pod(plan: RoundPlan) -> dict[str, tuple[int, ...]]:
    """The added ranks each participating NodeManager starts as joiners (pods with none left out)."""
    added = set(plan.added)
    out = {}
    for pod in plan.pods:
        joiners = tuple(r for r in pod.status_targets if r in added)
        if joiners:
            out[pod.node_manager_address] = joiners
    return out
