"""Software fault evidence (RFC §4.1): the normalised health of a rank, the kinds a NodeManager
reports, and FaultNormalizer, which maps a report to an original DP rank. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Health(StrEnum):
    """Normalised software evidence for one rank."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DEAD = "dead"
    PROTOCOL_ERROR = "protocol_error"


class EvidenceKind(StrEnum):
    """What a NodeManager reported (controller.proto SoftwareFaultKind)."""

    UNHEALTHY = "UNHEALTHY"
    DEAD = "DEAD"
    ENGINE_DEAD = "ENGINE_DEAD"
    PROTOCOL_ERROR = "PROTOCOL_ERROR"
    RECOVERED = "RECOVERED"


_KIND_TO_HEALTH = {
    EvidenceKind.UNHEALTHY: Health.UNHEALTHY,
    EvidenceKind.DEAD: Health.DEAD,
    EvidenceKind.ENGINE_DEAD: Health.DEAD,
    EvidenceKind.PROTOCOL_ERROR: Health.PROTOCOL_ERROR,
    EvidenceKind.RECOVERED: Health.HEALTHY,
}


class NormalizationError(ValueError):
    pass


@dataclass(frozen=True)
class RankEvidence:
    rank: int
    health: Health
    kind: EvidenceKind
    detail: str
    # Wall time the NodeManager observed it (its own clock; the Controller's wall clock at receipt
    # when a report carries none): orders the evidence of one rank (EvidenceIntake.record_software).
    # When the Controller received it (0 when unknown): shown in timelines; a round's reads supersede
    # evidence by the Controller's monotonic receipt time.
    observed_at_sec: float
    received_at_sec: float = 0.0
    received_mono_sec: float = 0.0
    # When the NodeManager first saw the engine diagnosing before this verdict (0: not seen).
    diagnosing_at_sec: float = 0.0


@dataclass(frozen=True)
class RankRead:
    """A strategy's last status read of one rank: when the Controller asked for it (its monotonic
    clock; the engine was read after that) and when the NodeManager read the engine (its own wall
    clock, 0 when the answer carried no time)."""

    mono_sec: float
    observed_at_sec: float = 0.0


class FaultNormalizer:
    """Software evidence → original DP rank of one instance (RFC §4.1).

    The endpoint id IS the original rank; the normaliser only checks it belongs to the instance and
    is not already committed dead. It never derives ranks from masks or from local indices.
    """

    def __init__(self, original_dp_ranks: Iterable[int]) -> None:
        self._original = frozenset(original_dp_ranks)

    def normalize(
        self, endpoint_id: int, kind: EvidenceKind, detail: str, observed_at_sec: float, dead_committed: Iterable[int]
    ) -> RankEvidence | None:
        """The evidence, or None when it concerns a committed dead rank (filtered, not an error)."""
        if endpoint_id not in self._original:
            raise NormalizationError(
                f"endpoint id {endpoint_id} is not an original DP rank of the instance {sorted(self._original)}"
            )
        if endpoint_id in set(dead_committed):
            return None
        return RankEvidence(endpoint_id, _KIND_TO_HEALTH[kind], kind, detail, observed_at_sec)
