"""What an Apply must be before anything is sent (pure): the instruction and its ranks, checked
against the pod's endpoints, its retired ranks and its joiners. Every refusal is InvalidArgument
naming the bad value.

* scale_down: `removed` is the cumulative list, this round included (non-empty, in range, no
  repeats, holding every rank this pod retired); the targets are survivors. `round_removed`, when
  given, is this round's ranks: a subset of `removed` holding no rank this pod retired.
* retry: `removed` is the Controller's committed set (holding this pod's retired ranks); nothing
  is removed.
* scale_up: `added` (non-empty, in range, no repeats) are ranks removed earlier that this round
  re-admits; `removed` the ranks still removed after it (disjoint from `added`, holding every
  retired rank of this pod that is not added). A target is a survivor (serving, not added) or a
  joiner of this pod (started with StartEngines join, and added). The master is in the grown group.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gen.motor.v1 import node_manager_pb2
from nodemanager.endpoints import check_endpoint_ids
from nodemanager.errors import InvalidArgument

_PB = node_manager_pb2


@dataclass(frozen=True)
class PodView:
    """What the checks compare with: the pod's ranks, the instance's dp_size, and the ranks retired
    (joiners included) and joining now."""

    dp_size: int
    local: Collection[int]
    headless: Collection[int]
    retired: frozenset[int]
    joining: frozenset[int] = frozenset()


def instruction_name(instruction: int) -> str:
    return _PB.Instruction.Name(instruction) if instruction in _PB.Instruction.values() else str(instruction)


def _ranks(field: str, ranks: list[int], dp_size: int) -> None:
    bad = [r for r in ranks if not 0 <= r < dp_size]
    if bad:
        raise InvalidArgument(f"{field} {bad} are not original ranks 0..{dp_size - 1}")
    repeated = sorted({r for r in ranks if ranks.count(r) > 1})
    if repeated:
        raise InvalidArgument(f"{field} {ranks} repeat ranks {repeated}")


def _master(dp_master_ip: str, dp_master_rank: int, dp_size: int, removed: list[int]) -> None:
    try:
        ipaddress.ip_address(dp_master_ip)
    except ValueError:
        raise InvalidArgument(f"dp_master_ip {dp_master_ip!r} is not an IP address") from None
    if not 0 <= dp_master_rank < dp_size:
        raise InvalidArgument(f"dp_master_rank {dp_master_rank} is not an original rank 0..{dp_size - 1}")
    if dp_master_rank in removed:
        raise InvalidArgument(f"dp_master_rank {dp_master_rank} is in removed_dp_ranks {sorted(removed)}")


def _targets(pod: PodView, endpoint_ids: list[int], removed: list[int], retired: Collection[int]) -> list[int]:
    ids = check_endpoint_ids(endpoint_ids, local=pod.local, headless=pod.headless, retired=retired)
    removed_targets = [i for i in ids if i in removed]
    if removed_targets:
        raise InvalidArgument(f"endpoint_ids {removed_targets} are in removed_dp_ranks {sorted(removed)}")
    return ids


def check_apply(pod: PodView, instruction: int, removed: list[int], dp_master_ip: str, dp_master_rank: int,
                endpoint_ids: list[int], added: list[int], round_removed: Sequence[int] = ()) -> list[int]:
    """The checked target ids of the apply; InvalidArgument naming what is wrong."""
    if round_removed and instruction != _PB.INSTRUCTION_SCALE_DOWN:
        raise InvalidArgument(f"round_removed_dp_ranks {list(round_removed)} are only for INSTRUCTION_SCALE_DOWN, "
                              f"not {instruction_name(instruction)}")
    if instruction == _PB.INSTRUCTION_SCALE_UP:
        return check_scale_up(pod, removed, added, dp_master_ip, dp_master_rank, endpoint_ids)
    if added:
        raise InvalidArgument(f"added_dp_ranks {added} are only for INSTRUCTION_SCALE_UP, not "
                              f"{instruction_name(instruction)}")
    if instruction == _PB.INSTRUCTION_RETRY:
        return check_retry(pod, removed, endpoint_ids)
    if instruction != _PB.INSTRUCTION_SCALE_DOWN:
        raise InvalidArgument(f"instruction {instruction_name(instruction)} is not supported; only "
                              "INSTRUCTION_SCALE_DOWN, INSTRUCTION_RETRY and INSTRUCTION_SCALE_UP are")
    if not removed:
        raise InvalidArgument("removed_dp_ranks [] is empty; it lists the cumulative removed original ranks")
    _ranks("removed_dp_ranks", removed, pod.dp_size)
    forgotten = sorted(pod.retired - set(removed))
    if forgotten:
        raise InvalidArgument(
            f"removed_dp_ranks {sorted(removed)} is not cumulative: it omits this pod's retired ranks {forgotten}"
        )
    _master(dp_master_ip, dp_master_rank, pod.dp_size, removed)
    _round_ranks(pod, list(round_removed), removed)
    return _targets(pod, endpoint_ids, removed, pod.retired)


def _round_ranks(pod: PodView, round_removed: list[int], removed: list[int]) -> None:
    if not round_removed:
        return
    _ranks("round_removed_dp_ranks", round_removed, pod.dp_size)
    outside = sorted(set(round_removed) - set(removed))
    if outside:
        raise InvalidArgument(f"round_removed_dp_ranks {round_removed} is not a subset of removed_dp_ranks "
                              f"{sorted(removed)}: {outside} are not in it")
    earlier = sorted(set(round_removed) & pod.retired)
    if earlier:
        raise InvalidArgument(f"round_removed_dp_ranks {round_removed} names ranks {earlier} that this pod retired "
                              "in an earlier round")


def check_retry(pod: PodView, removed: list[int], endpoint_ids: list[int]) -> list[int]:
    """A retry removes nothing: `removed_dp_ranks` is the Controller's cumulative committed set,
    which must hold this pod's retired ranks (the same contract as a scale-down's list)."""
    bad = [r for r in removed if not 0 <= r < pod.dp_size]
    if bad:
        raise InvalidArgument(f"removed_dp_ranks {bad} are not original ranks 0..{pod.dp_size - 1}")
    forgotten = sorted(pod.retired - set(removed))
    if forgotten:
        raise InvalidArgument(f"removed_dp_ranks {sorted(removed)} omits this pod's retired ranks {forgotten}")
    return _targets(pod, endpoint_ids, removed, pod.retired)


def check_scale_up(pod: PodView, removed: list[int], added: list[int], dp_master_ip: str, dp_master_rank: int,
                   endpoint_ids: list[int]) -> list[int]:
    if not added:
        raise InvalidArgument("added_dp_ranks [] is empty; INSTRUCTION_SCALE_UP names the original ranks it "
                              "re-admits")
    _ranks("added_dp_ranks", added, pod.dp_size)
    _ranks("removed_dp_ranks", removed, pod.dp_size)
    both = sorted(set(added) & set(removed))
    if both:
        raise InvalidArgument(f"ranks {both} are in both added_dp_ranks {sorted(added)} and removed_dp_ranks "
                              f"{sorted(removed)}")
    serving_added = sorted(r for r in added if r in pod.local and r not in pod.retired)
    if serving_added:
        raise InvalidArgument(f"added_dp_ranks {serving_added} serve on this pod already (not retired); only "
                              "removed ranks are re-admitted")
    forgotten = sorted(pod.retired - set(added) - set(removed))
    if forgotten:
        raise InvalidArgument(f"removed_dp_ranks {sorted(removed)} omits this pod's retired ranks {forgotten} "
                              f"that added_dp_ranks {sorted(added)} does not re-admit")
    _master(dp_master_ip, dp_master_rank, pod.dp_size, removed)
    # Joiners of this pod take the apply beside the survivors; other retired ranks do not.
    not_started = sorted(r for r in set(endpoint_ids) if r in pod.local and r in added and r not in pod.joining)
    if not_started:
        raise InvalidArgument(f"endpoint_ids {not_started} are in added_dp_ranks but were not started as joiners "
                              "(StartEngines with join)")
    ids = _targets(pod, endpoint_ids, removed, pod.retired - pod.joining)
    stray = sorted(r for r in ids if r in pod.joining and r not in added)
    if stray:
        raise InvalidArgument(f"endpoint_ids {stray} are joiners that added_dp_ranks {sorted(added)} does not name")
    return ids
