"""Time as the NodeManager sees it: a monotonic clock for deadlines and a wall clock for the stamps
it sends. Every part that reads time takes one through its constructor, so a test or the
simulation runs the same code on a clock it controls."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (deadlines, leases, settle bounds)."""

    def wall(self) -> float:
        """Seconds since the Unix epoch (observation and report stamps)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()
