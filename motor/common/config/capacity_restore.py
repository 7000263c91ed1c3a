"""capacity_restore: whether and when Motor brings a scaled-down instance back to every original
rank (docs/capacity-restoration.md). Off by default: a restoration drains the instance for the
length of a reconfiguration, which an operator decides to spend."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from motor.common.config.base import ConfigModel, PositiveSec


class CapacityRestoreConfig(ConfigModel):
    """off: RestoreInstance is refused; manual: restorations run when an operator asks for one;
    auto: also by itself, once every retired rank has had a ready place for settle_sec and the
    instance serves on fewer than min_alive_fraction of its original ranks."""

    mode: Literal["off", "manual", "auto"] = Field(
        default="off", description="off | manual (RestoreInstance only) | auto (also by itself).")
    min_alive_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        default=1.0, description="auto restores an instance serving on fewer than this fraction of its original "
                                 "ranks (1.0: any lost rank).")
    settle_sec: Annotated[float, Field(ge=0.0, le=3600.0)] = Field(
        default=30.0, description="auto waits until every retired rank has had a ready place, and the instance no "
                                  "fault evidence, for this many seconds.")
    in_flight_finish_sec: Annotated[float, Field(ge=0.0, le=600.0)] = Field(
        default=10.0, description="After new requests stop going to the instance, in-flight requests may finish for "
                                  "at most this many seconds; the rest continue elsewhere (re-inference).")
    check_interval_sec: PositiveSec = Field(
        default=1.0, description="Seconds between checks of pending and automatic restorations.")
    pending_request_ttl_sec: Annotated[float, Field(gt=0.0, le=86400.0)] = Field(
        default=3600.0, description="How long a request id is remembered (its answer repeated), in seconds.")
