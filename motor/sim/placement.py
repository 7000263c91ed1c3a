"""Expert placement for the reference engine (pure, no I/O).

Model: ``num_experts`` logical experts are served from ``num_experts + num_redundant_experts``
physical expert slots, split evenly over the DP ranks (``slots_per_rank``). A logical expert may
have several replicas (redundant experts, as EPLB places them); a rank's weights are gone when it
dies, so a scale-down is feasible only if every logical expert still has a replica on a survivor.

Placement rule (used for the initial layout and after every scale-down or scale-up): replica
counts are as even as possible (every expert gets one, the spare slots go one each to the
lowest-numbered experts, round after round), and the replicas are striped: list every replica grouped by expert,
then deal the list over the ranks like cards (replica ``k`` goes to the ``k % n``-th rank, slot
``k // n``). Because one expert's replicas are consecutive in that list, they land on distinct
ranks whenever the expert has at most ``n`` replicas, and every rank gets exactly
``slots_per_rank`` slots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


class PlacementError(ValueError):
    """A placement request that cannot be satisfied (message names the offending values)."""


class InsufficientRedundancyError(PlacementError):
    """Some logical experts have no replica left on the surviving ranks."""

    def __init__(self, lost_experts: Sequence[int], survivors: Sequence[int]) -> None:
        self.lost_experts = list(lost_experts)
        self.survivors = list(survivors)
        shown = self.lost_experts[:16]
        more = "" if len(self.lost_experts) <= 16 else f" (+{len(self.lost_experts) - 16} more)"
        super().__init__(
            f"insufficient expert redundancy: logical experts {shown}{more} have no replica "
            f"on surviving dp ranks {self.survivors}"
        )


@dataclass(frozen=True)
class ExpertPlacement:
    """Which logical expert each physical slot of each (original) DP rank holds."""

    num_logical_experts: int
    slots_per_rank: int
    by_rank: Mapping[int, tuple[int, ...]]

    @property
    def ranks(self) -> list[int]:
        return sorted(self.by_rank)

    def replicas(self) -> dict[int, list[int]]:
        """Logical expert -> sorted ranks holding at least one replica of it."""
        holders: dict[int, set[int]] = {e: set() for e in range(self.num_logical_experts)}
        for rank, slots in self.by_rank.items():
            for expert in slots:
                holders[expert].add(rank)
        return {e: sorted(r) for e, r in holders.items()}

    def replica_counts(self) -> dict[int, int]:
        counts = {e: 0 for e in range(self.num_logical_experts)}
        for slots in self.by_rank.values():
            for expert in slots:
                counts[expert] += 1
        return counts

    def to_json(self) -> dict[str, object]:
        return {
            "num_logical_experts": self.num_logical_experts,
            "slots_per_rank": self.slots_per_rank,
            "by_rank": {str(r): list(self.by_rank[r]) for r in self.ranks},
        }


def slots_per_rank(num_experts: int, num_redundant_experts: int, dp_size: int) -> int:
    """Physical expert slots per rank; refuses layouts that do not divide evenly."""
    if num_experts < 1:
        raise PlacementError(f"num_experts must be >= 1, got {num_experts}")
    if num_redundant_experts < 0:
        raise PlacementError(f"num_redundant_experts must be >= 0, got {num_redundant_experts}")
    if dp_size < 1:
        raise PlacementError(f"dp_size must be >= 1, got {dp_size}")
    physical = num_experts + num_redundant_experts
    if physical % dp_size != 0:
        raise PlacementError(
            f"num_experts {num_experts} + num_redundant_experts {num_redundant_experts} = "
            f"{physical} physical experts is not divisible by dp_size {dp_size}"
        )
    return physical // dp_size


def place(num_experts: int, ranks: Iterable[int], slots_per_rank: int) -> ExpertPlacement:
    """Balanced, striped placement of ``num_experts`` over ``ranks`` (see module docstring)."""
    rank_list = sorted(set(ranks))
    if not rank_list:
        raise PlacementError("cannot place experts on an empty set of ranks")
    if slots_per_rank < 1:
        raise PlacementError(f"slots_per_rank must be >= 1, got {slots_per_rank}")
    total_slots = len(rank_list) * slots_per_rank
    if total_slots < num_experts:
        raise PlacementError(
            f"{len(rank_list)} ranks x {slots_per_rank} slots = {total_slots} slots cannot hold "
            f"{num_experts} logical experts"
        )
    base, extra = divmod(total_slots, num_experts)
    replicas: list[int] = []
    for expert in range(num_experts):
        replicas.extend([expert] * (base + (1 if expert < extra else 0)))
    n = len(rank_list)
    slots: dict[int, list[int]] = {r: [] for r in rank_list}
    for k, expert in enumerate(replicas):
        slots[rank_list[k % n]].append(expert)
    return ExpertPlacement(
        num_logical_experts=num_experts,
        slots_per_rank=slots_per_rank,
        by_rank={r: tuple(s) for r, s in slots.items()},
    )


def initial_placement(num_experts: int, num_redundant_experts: int, dp_size: int) -> ExpertPlacement:
    per_rank = slots_per_rank(num_experts, num_redundant_experts, dp_size)
    return place(num_experts, range(dp_size), per_rank)


def lost_experts(placement: ExpertPlacement, survivors: Iterable[int]) -> list[int]:
    """Logical experts with no replica on any of ``survivors``."""
    alive = set(survivors)
    return [e for e, holders in placement.replicas().items() if not alive.intersection(holders)]


def replace_after_scale_down(placement: ExpertPlacement, survivors: Iterable[int]) -> ExpertPlacement:
    """New placement over ``survivors`` (same slots per rank), or InsufficientRedundancyError."""
    survivor_list = sorted(set(survivors))
    unknown = [r for r in survivor_list if r not in placement.by_rank]
    if unknown:
        raise PlacementError(f"survivors {unknown} are not ranks of the current placement {placement.ranks}")
    if not survivor_list:
        raise PlacementError("no surviving ranks to place experts on")
    lost = lost_experts(placement, survivor_list)
    if lost:
        raise InsufficientRedundancyError(lost, survivor_list)
    return place(placement.num_logical_experts, survivor_list, placement.slots_per_rank)


def replace_after_scale_up(placement: ExpertPlacement, grown: Iterable[int]) -> ExpertPlacement:
    """New placement over the grown group (same slots per rank): the re-admitted ranks get replicas
    back, and every logical expert has one (the grown group has at least the survivors' slots)."""
    grown_list = sorted(set(grown))
    new = place(placement.num_logical_experts, grown_list, placement.slots_per_rank)
    lost = lost_experts(new, grown_list)
    if lost:  # place() never leaves an expert out; kept as the engine's feasibility check
        raise InsufficientRedundancyError(lost, grown_list)
    return new
