"""FtGate: the static admission step of a scale-down round (RFC §5). Pure.

Reason codes and their order are Motor's public ones. Fused MC2 is deliberately not a condition, and
the redundant-expert count is not treated as a budget of removable ranks: whether the operators and
expert slots support a round is the engine's final call after apply.
"""

from __future__ import annotations

from motor.controller.model.capability import Capability
from motor.controller.model.runtime import GateResult

REASON_ORDER = (
    "FEATURE_DISABLED",
    "ENGINE_FT_REQUIRED",
    "EXTERNAL_LB_REQUIRED",
    "AUTO_RECOVERY_CONFLICT",
    "ENGINE_SCALE_DOWN_UNSUPPORTED",
    "EPLB_REQUIRED",
    "EXPERT_REDUNDANCY_REQUIRED",
)


def evaluate_gate(*, enable_fault_tolerance: bool, enable_dp_scale_down: bool, capability: Capability | None) -> GateResult:
    """Every failed condition is recorded, in REASON_ORDER.

    A missing capability (a pod did not report one, or pods disagreed) fails closed: every
    capability-derived condition counts as failed.
    """
    reasons: list[str] = []
    if not (enable_fault_tolerance and enable_dp_scale_down):
        reasons.append("FEATURE_DISABLED")
    cap = capability or Capability(False, False, False, False, False, 0)
    if not cap.engine_ft_enabled:
        reasons.append("ENGINE_FT_REQUIRED")
    if not cap.external_lb:
        reasons.append("EXTERNAL_LB_REQUIRED")
    if cap.auto_recovery:
        reasons.append("AUTO_RECOVERY_CONFLICT")
    if not cap.scale_down_supported:
        reasons.append("ENGINE_SCALE_DOWN_UNSUPPORTED")
    if not cap.enable_eplb:
        reasons.append("EPLB_REQUIRED")
    if cap.num_redundant_experts <= 0:
        reasons.append("EXPERT_REDUNDANCY_REQUIRED")
    return GateResult(allowed=not reasons, reason_codes=tuple(reasons))
