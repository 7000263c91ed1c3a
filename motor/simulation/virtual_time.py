"""Virtual time: an asyncio event loop whose clock jumps to the next timer when nothing is ready.

The loop is a SelectorEventLoop over a selector that never waits: `select(timeout)` advances the
virtual clock by `timeout` and reports no I/O (the simulation has none), so a 60 s collection window
costs one loop turn. `loop.time()` is the virtual clock; `VirtualClock` gives the Controller's
`Clock` interface over the same clock, which is the NodeManager's `Clock` as well: every part of
both that reads time is given this one.
"""

from __future__ import annotations

import asyncio
import selectors

WALL_EPOCH_SEC = 1_700_000_000.0


class DeadlockError(RuntimeError):
    """Nothing is ready and no timer is pending: the simulated world stopped."""


class _NeverWaitingSelector(selectors.SelectSelector):
    def __init__(self, loop_ref: list[VirtualTimeLoop]) -> None:
        super().__init__()
        self._loop_ref = loop_ref

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None:
            raise DeadlockError("no task is ready and no timer is pending")
        if timeout > 0:
            self._loop_ref[0].advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual_now_sec = 0.0
        ref: list[VirtualTimeLoop] = []
        super().__init__(_NeverWaitingSelector(ref))
        ref.append(self)
        # Timers within this of now run in the same turn; keep it small so ordering stays exact.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._virtual_now_sec

    def advance(self, seconds: float) -> None:
        self._virtual_now_sec += seconds


class VirtualClock:
    """The Controller's `Clock` over a virtual loop (wall = a fixed epoch + virtual seconds)."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop

    def wall(self) -> float:
        return WALL_EPOCH_SEC + self._loop.time()

    def monotonic(self) -> float:
        return self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
