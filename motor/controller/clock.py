"""Time as the controller sees it; tests swap in a fake clock."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the Unix epoch (timestamps shown to people and peers)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (deadlines, windows)."""

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to, or when something sleeps on it (sleep advances it).

    Used by tests of the pure and strategy layers, so windows and deadlines are exercised without
    real waiting.
    """

    def __init__(self, wall_start_sec: float = 1_700_000_000.0) -> None:
        self._offset = 0.0
        self._wall_start = wall_start_sec

    def wall(self) -> float:
        return self._wall_start + self._offset

    def monotonic(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot go back {seconds}s")
        self._offset += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        # Yield so other tasks run as they would during a real sleep.
        await asyncio.sleep(0)
