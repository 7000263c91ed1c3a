"""`fault_tolerance_config.fast_recovery_config`: when the Controller may recover an instance whose
every active rank is UNHEALTHY and none DEAD (a transient collective failure) by the engines' `retry`
instead of waiting for the collection timeout and reconfiguring it, and how long one attempt may take.

The switch itself is `fault_tolerance_config.enable_fast_recovery` (off by default, as the RFC's
placeholder); this block is the policy that decides, per fault, whether the evidence fits."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from motor.common.config.base import ConfigModel

# Same bounds as a scale-down round's (the guard lease must stay within the NodeManagers' 3600 s).
MAX_FAST_RECOVERY_DEADLINE_SEC = 1675.0
MAX_POLL_INTERVAL_SEC = 10.0
# Attempts are counted per instance in memory; a window longer than a day counts nothing useful.
MAX_ATTEMPT_WINDOW_SEC = 86400.0
MAX_PATTERNS = 64


def normalize_code(code: str) -> str:
    """A fault code compared without case and without a 0x prefix ('0xa8028801' is 'A8028801')."""
    return code.strip().upper().removeprefix("0X")


def _check_patterns(value: list[str], key: str) -> list[str]:
    if len(value) > MAX_PATTERNS:
        raise ValueError(f"{key} holds {len(value)} patterns; at most {MAX_PATTERNS}")
    for pattern in value:
        if not pattern.strip():
            raise ValueError(f"{key} holds a blank pattern {pattern!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{key} pattern {pattern!r} is not a regular expression: {exc}") from None
    return value


class FastRecoveryConfig(ConfigModel):
    """The policy of fast recovery by `retry` and the timers of one attempt."""

    allowed_fault_infos: list[str] = Field(
        default=[],
        description="Regular expressions (re.search) of the engines' fault_info that a retry may clear; every "
                    "UNHEALTHY rank's fault_info must match one. Empty: any fault_info.")
    refused_fault_infos: list[str] = Field(
        default=[],
        description="Regular expressions of fault_info that a retry must not be tried on (checked before "
                    "allowed_fault_infos).")
    allowed_hardware_fault_codes: list[str] = Field(
        default=[],
        description="MindCluster fault codes (compared without case or 0x prefix) that do not stop a retry "
                    "when a mapped L4-L6 hardware fault is on the instance; any other mapped hardware fault "
                    "means the fault is not transient. Empty: every mapped hardware fault stops it.")
    max_attempts: Annotated[int, Field(ge=1, le=100)] = Field(
        default=2, description="Fast recoveries started on one instance within attempt_window_sec at most; "
                               "beyond, the instance waits for a DEAD rank or the collection timeout.")
    attempt_window_sec: Annotated[float, Field(gt=0, le=MAX_ATTEMPT_WINDOW_SEC)] = Field(
        default=600.0, description="Sliding window, in seconds, over which max_attempts counts.")
    poll_interval_sec: Annotated[float, Field(gt=0, le=MAX_POLL_INTERVAL_SEC)] = Field(
        default=0.5, description="Seconds between the Controller's status reads while a retry runs.")
    execution_deadline_sec: Annotated[float, Field(gt=0, le=MAX_FAST_RECOVERY_DEADLINE_SEC)] = Field(
        default=30.0, description="Seconds the engines may take to become apply-ready, and again to be healthy "
                                  "after the retry, before the attempt fails (whole-instance reconfiguration).")

    @field_validator("allowed_fault_infos")
    @classmethod
    def _check_allowed(cls, value: list[str]) -> list[str]:
        return _check_patterns(value, "allowed_fault_infos")

    @field_validator("refused_fault_infos")
    @classmethod
    def _check_refused(cls, value: list[str]) -> list[str]:
        return _check_patterns(value, "refused_fault_infos")

    @field_validator("allowed_hardware_fault_codes")
    @classmethod
    def _check_codes(cls, value: list[str]) -> list[str]:
        out = []
        for code in value:
            if not re.fullmatch(r"(0[xX])?[0-9A-Za-z_-]{1,32}", code):
                raise ValueError(f"allowed_hardware_fault_codes entry {code!r} is not a fault code (hex such as "
                                 "80E18402, or a word)")
            out.append(normalize_code(code))
        return out

    def guard_lease_sec(self, request_timeout_sec: float) -> float:
        """Two windows (ready, recovered) plus request and poll slack, as a scale-down round's lease."""
        return 2 * self.execution_deadline_sec + 4 * request_timeout_sec + max(5.0, self.poll_interval_sec)
