"""ScaleDownContext: the frozen input of one DP scale-down round (RFC §4.2), built by the
FaultManager from the snapshot that chose scale-down. Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleDownContext:
    """Frozen input of one scale-down round, built by the FaultManager."""

    instance_id: int
    original_dp_ranks: tuple[int, ...]
    dead_committed: frozenset[int]
    # Authoritative removal candidates (software DEAD) and apply-ready survivors (UNHEALTHY) of the
    # snapshot that chose scale-down. Hardware-mapped ranks only validated the choice.
    dead: frozenset[int]
    unhealthy: frozenset[int]
    fallback_strategy: str
    decided_at_sec: float
    hardware_ranks: frozenset[int] = frozenset()

    @property
    def active_ranks(self) -> frozenset[int]:
        return frozenset(self.original_dp_ranks) - self.dead_committed
