"""RFC §7 `fault_tolerance_config`: key names and defaults exactly those of the RFC, the timers the
RFC names elsewhere (§4.4) beside them, and what derives from them (the scale-down proxy switch,
refused as input, and the NodeManager guard lease)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator, model_validator

from motor.common.config.base import ConfigModel
from motor.common.config.fast_recovery import FastRecoveryConfig

# Guard lease bound of the NodeManager contract (RFC §6): lease_sec ∈ (0, 3600].
MAX_GUARD_LEASE_SEC = 3600.0
# One Controller call longer than a minute is a peer that is gone, not a slow one.
MAX_REQUEST_TIMEOUT_SEC = 60.0
# Status reads further apart than this would spend a default round's whole window on a handful.
MAX_POLL_INTERVAL_SEC = 10.0
# The rest of the lease (guard_lease_sec) once the other two timers are at their bounds, so any
# accepted configuration derives a lease the NodeManagers accept: 1675 s.
MAX_EXECUTION_DEADLINE_SEC = (MAX_GUARD_LEASE_SEC - 4 * MAX_REQUEST_TIMEOUT_SEC - max(5.0, MAX_POLL_INTERVAL_SEC)) / 2
# A mapped hardware fault waits this long at most for the engines' perception before reconfiguring.
MAX_CORRELATION_WINDOW_SEC = 60.0
# A backstop scan (and first reconfiguration retry) rarer than the default bound of a whole
# reconfiguration (reconfiguration_timeout_sec, 300 s) backs nothing up.
MAX_CHECK_INTERVAL_SEC = 300.0
# Ten times the default: an instance that waits longer for a complete snapshot is better rebuilt.
MAX_COLLECTION_TIMEOUT_SEC = 600.0
# Slower, a NodeManager would first see a fault after the default collection timeout ran out.
MAX_ENGINE_POLL_INTERVAL_SEC = 60.0


class DpScaleDownConfig(ConfigModel):
    """RFC §7 `dp_scale_down_config`: the timers of one scale-down round. Their bounds keep the
    derived guard lease within the NodeManagers' 3600 s whatever the combination."""

    request_timeout_sec: Annotated[float, Field(gt=0, le=MAX_REQUEST_TIMEOUT_SEC)] = Field(
        default=5.0, description="Deadline of one Controller call to a NodeManager or the Coordinator, in seconds.")
    poll_interval_sec: Annotated[float, Field(gt=0, le=MAX_POLL_INTERVAL_SEC)] = Field(
        default=1.0, description="Seconds between the Controller's status reads while a round executes.")
    execution_deadline_sec: Annotated[float, Field(gt=0, le=MAX_EXECUTION_DEADLINE_SEC)] = Field(
        default=30.0, description="Seconds a round's apply may take on every survivor before the round fails.")

    @field_validator("execution_deadline_sec", mode="wrap")
    @classmethod
    def _explain_deadline_bound(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            if any(e["type"] == "less_than_equal" for e in exc.errors()):
                raise ValueError(
                    f"must be at most {MAX_EXECUTION_DEADLINE_SEC:g}: the guard lease 2 × execution_deadline_sec + "
                    f"4 × request_timeout_sec + max(5, poll_interval_sec) must stay within the NodeManager bound "
                    f"of {MAX_GUARD_LEASE_SEC:g}s with request_timeout_sec and poll_interval_sec at their bounds "
                    f"({MAX_REQUEST_TIMEOUT_SEC:g}, {MAX_POLL_INTERVAL_SEC:g})"
                ) from None
            raise


class FaultToleranceConfig(ConfigModel):
    """RFC §7 `fault_tolerance_config`, plus the timers of RFC §4.4. The guard lease a round holds on
    the NodeManagers derives from dp_scale_down_config (2 × execution_deadline_sec + 4 ×
    request_timeout_sec + max(5, poll_interval_sec), 85 s with the defaults), which the timers' bounds
    keep within 3600 s; `enable_dp_scale_down_proxy` derives from the two switches and is refused as input."""

    enable_fault_tolerance: bool = Field(
        default=True,
        description="Master switch: off, NodeManagers do not poll the engines' FT status and no scale-down runs.")
    enable_dp_scale_down: bool = Field(
        default=False, description="Recover by scaling the DP group down around failed ranks (RFC §4).")
    enable_dp_scale_up: bool = Field(
        default=False,
        description="After a scale-down commits, stop the pods whose ranks are all retired (recyclable).")
    dp_scale_down_config: DpScaleDownConfig = Field(
        default=DpScaleDownConfig(), description="Timers of one scale-down round.")
    # The RFC's EngineFastRecoveryStrategy slot (a placeholder there), off by default as there.
    enable_fast_recovery: bool = Field(
        default=False,
        description="Recover an instance whose every active rank is UNHEALTHY and none DEAD by the engines' "
                    "retry, when fast_recovery_config's policy matches (docs/fast-recovery.md).")
    fast_recovery_config: FastRecoveryConfig = Field(
        default=FastRecoveryConfig(), description="Policy and timers of fast recovery by retry.")
    hardware_ft_correlation_window_sec: Annotated[float, Field(gt=0, le=MAX_CORRELATION_WINDOW_SEC)] = Field(
        default=5.0,
        description="Seconds a hardware fault waits for matching engine FT evidence before the instance is "
                    "reconfigured.")
    # RFC name kept as is (it carries no unit).
    strategy_center_check_interval: Annotated[float, Field(gt=0, le=MAX_CHECK_INTERVAL_SEC)] = Field(
        default=10.0,
        description="Seconds between the strategy center's scans of every instance; the first reconfiguration "
                    "retry delay.")
    # Motor derives its default from the engines' gloo timeout.
    software_status_collection_timeout_sec: Annotated[float, Field(gt=0, le=MAX_COLLECTION_TIMEOUT_SEC)] = Field(
        default=60.0,
        description="Seconds, from a round's first UNHEALTHY/DEAD report, to collect every rank's status.")
    engine_status_poll_interval_sec: Annotated[float, Field(gt=0, le=MAX_ENGINE_POLL_INTERVAL_SEC)] = Field(
        default=1.0, description="Seconds between a NodeManager's polls of each engine's FT status.")
    # Beyond the RFC, opt-in: an idle instance runs no collective, so a DEAD rank's survivors stay
    # HEALTHY; one canary request makes their collective fail, the snapshot completes and the
    # instance scales down instead of reconfiguring after the collection timeout.
    idle_fault_probe: bool = Field(
        default=False, description="While a rank is DEAD and its survivors stay HEALTHY, send one canary request to a "
                    "survivor so the instance scales down; off: the RFC's idle row.")
    idle_fault_probe_timeout_sec: Annotated[float, Field(gt=0, le=30.0)] = Field(
        default=2.0, description="Bound of one canary in seconds, the Coordinator's request to the engine included.")

    @model_validator(mode="before")
    @classmethod
    def _refuse_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and "enable_dp_scale_down_proxy" in data:
            raise ValueError(
                "enable_dp_scale_down_proxy="
                f"{data['enable_dp_scale_down_proxy']!r} cannot be set: it is derived from "
                "enable_fault_tolerance, enable_dp_scale_down and enable_fast_recovery"
            )
        return data

    @property
    def enable_dp_scale_down_proxy(self) -> bool:
        # Fast recovery goes through the same proxy (guard, status, apply retry, finalize).
        return self.enable_fault_tolerance and (self.enable_dp_scale_down or self.enable_fast_recovery)

    @property
    def fast_recovery_enabled(self) -> bool:
        return self.enable_fault_tolerance and self.enable_fast_recovery

    @property
    def guard_lease_sec(self) -> float:
        """Two recovery windows plus request and poll slack (85 s with the RFC defaults)."""
        c = self.dp_scale_down_config
        return 2 * c.execution_deadline_sec + 4 * c.request_timeout_sec + max(5.0, c.poll_interval_sec)
