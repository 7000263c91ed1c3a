"""Virtual time: an asyncio event loop whose clock jumps to the next timer when nothing is ready.

The loop is a SelectorEventLoop over a selector that never waits: `select(timeout)` advances the
virtual clock by `timeout` and reports no I/O (the simulation has none), so a 60 s collection window
costs one loop turn. `loop.time()` is the virtual clock; `VirtualClock` gives the Controller's
`Clock` interface over the same clock.

A few NodeManager modules read `time.time()`/`time.monotonic()` directly (the long poll's settle
deadline, the poller's observation stamps) and the Controller's strategies name their request ids
with `uuid.uuid4()`. `patched_process_globals` replaces exactly those module globals for the length
of one run (a virtual `time` and a seeded `uuid`) and restores them; nothing else is patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import random
import selectors
import uuid as _uuid
from collections.abc import Iterator

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


class _VirtualTimeModule:
    """What the patched modules see as `time`: the virtual clock (only what they call)."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock.wall()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def strftime(self, fmt: str, *args) -> str:
        return "virtual"


class _SeededUuid:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> _uuid.UUID:
        return _uuid.UUID(int=self._rng.getrandbits(128), version=4)


# Modules that read the process clock directly (they take no clock through their constructors).
TIME_READERS = ("nodemanager.ft_proxy", "nodemanager.ft_poller", "nodemanager.engine_http")
# Modules that name request ids with uuid4 (the ids must repeat for a seed to replay).
UUID_READERS = (
    "motor.controller.fault_tolerance.strategy.dp_scale_down",
    "motor.controller.fault_tolerance.strategy.reconfiguration",
    "motor.controller.fault_tolerance.idle_probe",
)


@contextlib.contextmanager
def patched_process_globals(clock: VirtualClock, rng: random.Random) -> Iterator[None]:
    saved: list[tuple[object, str, object]] = []
    try:
        for name in TIME_READERS:
            module = importlib.import_module(name)
            saved.append((module, "time", module.time))
            module.time = _VirtualTimeModule(clock)  # type: ignore[attr-defined]
        for name in UUID_READERS:
            module = importlib.import_module(name)
            saved.append((module, "uuid", module.uuid))
            module.uuid = _SeededUuid(rng)  # type: ignore[attr-defined]
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)
