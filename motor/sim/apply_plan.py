"""What the apply rules decide from, and what they decide (pure data, shared by ``apply_rules`` and
``scale_up_rules``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from motor.sim.apply_body import Instruction
from motor.sim.placement import ExpertPlacement


@dataclass(frozen=True)
class GroupContext:
    """What a rank knows about its DP group when an apply arrives."""

    rank: int
    dp_size: int
    members: tuple[int, ...]  # current members, original ranks, sorted; empty: a joiner, in no group yet
    removed: tuple[int, ...]  # cumulative removed original ranks, sorted
    master_ip: str
    master_port: int

    @property
    def in_group(self) -> bool:
        return bool(self.members)

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
    # A scale_down that names the store address forms the new group through a fresh store there,
    # even when it is the current one (whose server still holds that port, so it cannot bind).
    new_store: bool = False
    added: tuple[int, ...] = ()  # scale_up: the original ranks re-admitted
    # scale_up on a survivor: its group is live, so it first leaves it together with every member
    # at one batch boundary (announced through the step's all-reduce) instead of breaking it.
    pause_group: bool = False

    @property
    def master_rank(self) -> int:
        return self.members[0]


@dataclass(frozen=True)
class ApplyDecision:
    """``plan`` set: accept. ``rejection`` set: record in status. ``ignored`` set: log only.
    ``http_refusal`` set: answer 400 with it and leave the status untouched (``scale_up``).

    ``not_ready``: the rejection is about the rank's state, not the command (vLLM answers 400).
    """

    plan: RecoveryPlan | None = None
    rejection: str | None = None
    ignored: str | None = None
    not_ready: bool = False
    http_refusal: str | None = None
    warnings: list[str] = field(default_factory=list)
