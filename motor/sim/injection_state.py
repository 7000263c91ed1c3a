"""Armed fault injections of one rank: what the engine consults at its hook points.

Set by the ``/motor/admin/inject`` routes (``injection``); kept apart from them so that the engine
depends on this state only, never on the routes that drive it.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from motor.common.waiting import wait_set

_MAX_HANG_SEC = 24 * 3600.0  # "forever" still has a bound


@dataclass
class InjectionState:
    fail_next_apply: str | None = None
    fail_vote: str | None = None  # this rank votes against committing the next round
    stall_next_apply: bool = False
    slow_rebuild_sec: float = 0.0
    status_hang_until: float | None = None  # monotonic; None: not hanging
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    def take_fail_next_apply(self) -> str | None:
        reason, self.fail_next_apply = self.fail_next_apply, None
        return reason

    def take_fail_vote(self) -> str | None:
        reason, self.fail_vote = self.fail_vote, None
        return reason

    def take_stall_next_apply(self) -> bool:
        stall, self.stall_next_apply = self.stall_next_apply, False
        return stall

    def hang_status(self, duration_sec: float | None) -> None:
        self._release.clear()
        self.status_hang_until = time.monotonic() + (duration_sec if duration_sec is not None else _MAX_HANG_SEC)

    async def wait_status_released(self) -> None:
        """Block a status request while a hang is armed (bounded by the hang window)."""
        until = self.status_hang_until
        if until is None:
            return
        remaining = until - time.monotonic()
        if remaining <= 0:
            self.status_hang_until = None
            return
        await wait_set(self._release, remaining)

    def clear(self) -> None:
        self.fail_next_apply = None
        self.fail_vote = None
        self.stall_next_apply = False
        self.slow_rebuild_sec = 0.0
        self.status_hang_until = None
        self._release.set()

    def to_json(self) -> dict[str, Any]:
        hang = None
        if self.status_hang_until is not None:
            hang = max(0.0, round(self.status_hang_until - time.monotonic(), 3))
        return {
            "fail_next_apply": self.fail_next_apply,
            "fail_vote": self.fail_vote,
            "stall_next_apply": self.stall_next_apply,
            "slow_rebuild_sec": self.slow_rebuild_sec,
            "status_hang_remaining_sec": hang,
        }

    def arm(self, fault: str, params: dict[str, Any]) -> bool:
        """Arms one of the faults this state holds, from an inject body's parameters (the reference
        and the light engines take the same ones); False for a fault that is not armed but done."""
        if fault == "hang_status":
            self.hang_status(number_param(params, "duration_sec", fault, required=False, minimum=0, inclusive=False))
        elif fault == "fail_next_apply":
            self.fail_next_apply = reason_param(params, "injected apply failure")
        elif fault == "fail_vote":
            self.fail_vote = reason_param(params, "injected vote failure")
        elif fault == "stall_next_apply":
            self.stall_next_apply = True
        elif fault == "slow_rebuild":
            delay = number_param(params, "delay_sec", fault, required=True, minimum=0, inclusive=True)
            self.slow_rebuild_sec = float(delay or 0.0)
        elif fault == "clear":
            self.clear()
        else:
            return False
        return True


class InjectionError(ValueError):
    """Bad inject body; the message names the bad value."""


def number_param(params: dict[str, Any], key: str, fault: str, *, required: bool, minimum: float,
                 inclusive: bool) -> float | None:
    if key not in params:
        if required:
            raise InjectionError(f"fault {fault!r} needs {key!r}")
        return None
    value = params[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (not inclusive and value == minimum):
        op = ">=" if inclusive else ">"
        raise InjectionError(f"{key} must be a number {op} {minimum:g}, got {value!r}")
    return float(value)


def reason_param(params: dict[str, Any], default: str) -> str:
    value = params.get("reason", default)
    if not isinstance(value, str) or not value.strip():
        raise InjectionError(f"reason must be a non-blank string, got {value!r}")
    return value
