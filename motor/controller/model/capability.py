"""Capability: the FtCapability every pod of an instance agreed on (RFC §5), the static gate's input.
Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    """FtCapability as agreed by every pod of an instance."""

    engine_ft_enabled: bool
    scale_down_supported: bool
    external_lb: bool
    auto_recovery: bool
    enable_eplb: bool
    num_redundant_experts: int
    retry_supported: bool = False
    # The engines re-admit removed ranks (scale_up); not needed by the scale-down gate.
    supports_scale_up: bool = False
