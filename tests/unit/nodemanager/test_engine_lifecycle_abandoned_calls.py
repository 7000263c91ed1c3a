"""EngineLifecycle when a caller gives up halfway (gRPC cancels the handler of a call whose client
cancelled it or whose deadline passed): a stop already begun still ends with every engine stopped,
and the next call finds them stopped, not half-stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from nodemanager.config import NodeManagerConfig
from nodemanager.endpoints import LocalEndpoint
from nodemanager.engine_lifecycle import EngineLifecycle
from nodemanager.errors import FailedPrecondition
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.supervisor import RunState

pytestmark = pytest.mark.timeout(10)


class SlowStopSupervisor:
    """ProcessSupervisor's states and refusals; a stop lasts until ``exited`` is set (the engines
    take their grace period to end)."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.states = {i: RunState.READY for i in ids}
        self.exited = asyncio.Event()
        self.spawned: list[str] = []

    @property
    def ids(self) -> list[int]:
        return sorted(self.states)

    def spawn(self, ids: list[int], dp_master_ip: str, dp_master_port: int, request_id: str = "") -> dict[int, str]:
        busy = [i for i in ids if self.states[i] in (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        if busy:
            raise FailedPrecondition(f"engines {busy} are already running; stop or relaunch them first")
        for i in ids:
            self.states[i] = RunState.STARTING
        self.spawned.append(request_id)
        return {}

    async def wait_ready(self, ids: list[int]) -> dict[int, str | None]:
        for i in ids:
            self.states[i] = RunState.READY
        return {i: None for i in ids}

    async def stop(self, ids: Iterable[int], grace_sec: float, reason: str, request_id: str = "") -> list[int]:
        targets = [i for i in ids if self.states[i] in (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        for i in targets:
            self.states[i] = RunState.STOPPING
        await self.exited.wait()
        for i in targets:
            self.states[i] = RunState.STOPPED
        return sorted(targets)

    def endpoints(self, ids: Iterable[int]) -> list[LocalEndpoint]:
        return [LocalEndpoint(i, "127.0.0.2", 8000 + i, False, ()) for i in ids]


def lifecycle(tmp_path: Path, wall=time.time) -> tuple[EngineLifecycle, SlowStopSupervisor]:
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "log_dir": str(tmp_path), "dp_master_ip": "127.0.0.2",
        "dp_master_port": 29500,
    })
    sup = SlowStopSupervisor([0, 1])
    return EngineLifecycle(cfg, sup, PodState(7, True), GuardState(), wall=wall), sup  # type: ignore[arg-type]


async def until(predicate, what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_a_cancelled_stop_still_stops_every_engine_and_the_next_start_launches_them(tmp_path: Path) -> None:
    wall = [100.0]
    lc, sup = lifecycle(tmp_path, lambda: wall[0])
    stop = asyncio.create_task(lc.stop_engines(instance_id=7, request_id="reconf-a", grace_sec=0.0, endpoint_ids=[]))
    await until(lambda: set(sup.states.values()) == {RunState.STOPPING}, "both engines stopping")
    stop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stop
    # The next attempt's start waits for the abandoned stop instead of refusing half-stopped engines.
    start = asyncio.create_task(lc.start_engines(instance_id=7, request_id="reconf-b", dp_master_ip="127.0.0.2",
                                                 dp_master_port=0, endpoint_ids=[], timeout_sec=5.0))
    await asyncio.sleep(0.05)
    assert not start.done(), start.exception()
    assert sup.spawned == []
    wall[0] = 105.0
    sup.exited.set()
    launch = await start
    assert [e.id for e in launch.endpoints] == [0, 1]
    # Stamped when the new engines spawned, after the old ones stopped: what was observed of the
    # old ones while they stopped is older.
    assert launch.launched_at_unix_sec == 105.0
    assert sup.spawned == ["reconf-b"] and set(sup.states.values()) == {RunState.READY}


async def test_a_cancelled_relaunch_still_stops_and_starts_the_engines(tmp_path: Path) -> None:
    lc, sup = lifecycle(tmp_path)
    relaunch = asyncio.create_task(lc.relaunch_engines(instance_id=7, request_id="rl-a", dp_master_ip="127.0.0.2",
                                                       dp_master_port=0, grace_sec=0.0, timeout_sec=5.0))
    await until(lambda: set(sup.states.values()) == {RunState.STOPPING}, "both engines stopping")
    relaunch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relaunch
    sup.exited.set()
    await until(lambda: sup.spawned == ["rl-a"], "the relaunch spawned its engines")
    stopped = await lc.stop_engines(instance_id=7, request_id="stop-b", grace_sec=0.0, endpoint_ids=[])
    assert stopped == [0, 1] and set(sup.states.values()) == {RunState.STOPPED}
