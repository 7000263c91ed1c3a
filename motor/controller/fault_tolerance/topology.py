"""Grouping of a round's NodeManagers from the full endpoint topology (RFC §5 "组 NodeManager"). Pure.

Routable survivors get status and apply; pods with only headless or only removed ranks still take
part (guard / finalize). Missing topology, or pods sharing a NodeManager address, fails closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from motor.controller.model.placement import EndpointInfo, PodInfo


class TopologyError(ValueError):
    pass


@dataclass(frozen=True)
class PodPlan:
    pod_ip: str
    node_manager_address: str
    # Routable survivors of this pod: status and apply go to these.
    status_targets: tuple[int, ...]
    # Ranks of this pod the round removes (retired on commit; headless included).
    retired: tuple[int, ...]


@dataclass(frozen=True)
class RoundPlan:
    removed_cumulative: tuple[int, ...]
    removed_this_round: tuple[int, ...]
    survivors: tuple[int, ...]
    dp_master_rank: int
    dp_master_ip: str
    pods: tuple[PodPlan, ...]
    # An elastic scale-up's re-admitted ranks (motor.controller.restoration.scale_up_plan); empty
    # for a scale-down or a retry. `removed_cumulative` is then what stays removed after it.
    added: tuple[int, ...] = ()

    @property
    def routable_survivors(self) -> tuple[int, ...]:
        return tuple(sorted(r for pod in self.pods for r in pod.status_targets))

    def pod(self, address: str) -> PodPlan:
        for pod in self.pods:
            if pod.node_manager_address == address:
                return pod
        raise KeyError(address)


def plan_round(
    *,
    original_dp_ranks: Iterable[int],
    dead_committed: Iterable[int],
    removed_this_round: Iterable[int],
    endpoints: Mapping[int, EndpointInfo],
    pods: Iterable[PodInfo],
    retry: bool = False,
) -> RoundPlan:
    """Participants, targets and the new master of one round, or TopologyError. A `retry` (fast
    recovery) removes no rank: every active rank is a target, the master stays the lowest."""
    original = set(original_dp_ranks)
    committed = set(dead_committed)
    removing = set(removed_this_round)
    if retry and removing:
        raise TopologyError(f"a retry removes no rank, not {sorted(removing)}")
    if not removing and not retry:
        raise TopologyError("the round removes no rank")
    if not removing <= original:
        raise TopologyError(f"ranks {sorted(removing - original)} are not original DP ranks {sorted(original)}")
    if removing & committed:
        raise TopologyError(f"ranks {sorted(removing & committed)} are already committed dead")
    active = original - committed
    missing = sorted(r for r in active if r not in endpoints)
    if missing:
        raise TopologyError(f"no endpoint known for ranks {missing}")
    pod_list = list(pods)
    owner: dict[int, PodInfo] = {}
    by_address: dict[str, PodInfo] = {}
    for pod in sorted(pod_list, key=lambda p: p.pod_ip):
        if not pod.node_manager_address:
            raise TopologyError(f"pod {pod.pod_ip} has no NodeManager address")
        other = by_address.setdefault(pod.node_manager_address, pod)
        if other is not pod:
            # The round's calls are keyed by address: one NodeManager would answer for both pods.
            raise TopologyError(f"pods {other.pod_ip} and {pod.pod_ip} share NodeManager address "
                                f"{pod.node_manager_address}")
        for rank in pod.ranks:
            if rank in owner:
                raise TopologyError(f"rank {rank} is claimed by pods {owner[rank].pod_ip} and {pod.pod_ip}")
            owner[rank] = pod
    orphan = sorted(r for r in active if r not in owner)
    if orphan:
        raise TopologyError(f"no pod hosts ranks {orphan}")
    survivors = sorted(active - removing)
    if not survivors:
        raise TopologyError(f"removing {sorted(removing)} leaves no survivor")
    routable = [r for r in survivors if not endpoints[r].headless]
    if not routable:
        raise TopologyError(f"survivors {survivors} are all headless: nobody can take the apply")
    master = survivors[0]
    plans = []
    for pod in sorted(pod_list, key=lambda p: p.pod_ip):
        pod_active = [r for r in pod.ranks if r in active]
        if not pod_active:
            # Emptied by earlier rounds: not a participant any more.
            continue
        plans.append(
            PodPlan(
                pod_ip=pod.pod_ip,
                node_manager_address=pod.node_manager_address,
                status_targets=tuple(sorted(r for r in pod_active if r in routable)),
                retired=tuple(sorted(r for r in pod_active if r in removing)),
            )
        )
    return RoundPlan(
        removed_cumulative=tuple(sorted(committed | removing)),
        removed_this_round=tuple(sorted(removing)),
        survivors=tuple(survivors),
        dp_master_rank=master,
        dp_master_ip=endpoints[master].ip,
        pods=tuple(plans),
    )


def recyclable_pods(pods: Iterable[PodInfo], dead_committed: Iterable[int]) -> list[PodInfo]:
    """Pods every rank of which is committed dead: candidates for stop when scale-up is allowed."""
    committed = set(dead_committed)
    return [pod for pod in pods if pod.ranks and set(pod.ranks) <= committed]
