"""What the simulation puts under the REAL `nodemanager.agent.NodeManagerAgent` of a pod: the
process supervisor (`SimSupervisor`, over the simulated engines), the engine HTTP client
(`SimEngineHttp`, answering with the engines' documents, parsed by the real parser) and where the
StopPod record is kept (`motor.common.text_file.MemoryTextFile`, the pod's emptyDir: it outlives the NodeManager's
container). The agent composes everything else itself; the Controller client is the in-memory
transport (`motor.simulation.transports`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from nodemanager.config import NodeManagerConfig
from nodemanager.endpoints import LocalEndpoint
from nodemanager.dialects import make_dialect
from nodemanager.engine_answers import EngineTimeout, EngineUnreachable
from nodemanager.engine_http import ApplyOutcome, EngineAddress
from nodemanager.errors import FailedPrecondition, Unavailable
from nodemanager.supervisor import EngineExit, EngineSlot, RunState

from motor.simulation.engines import SimGroup

log = logging.getLogger("motor.simulation.pod")


class SimSupervisor:
    """ProcessSupervisor's interface over the simulated group: spawn, readiness, stop, exits."""

    def __init__(self, config: NodeManagerConfig, group: SimGroup, *, on_ready: Callable[[int, int], None],
                 on_exit: Callable[[EngineExit], None], on_stopping: Callable[[int], None]) -> None:
        self._config, self._group = config, group
        self._on_ready, self._on_exit, self._on_stopping = on_ready, on_exit, on_stopping
        self._slots = {s.dp_rank: EngineSlot(spec=s, host=config.pod_ip, port=8000 + s.dp_rank) for s in config.engines}
        self._pid = 1000 + 100 * config.engines[0].dp_rank
        # The NodeManager's container went away (`kill_all`): nothing starts from this supervisor again.
        self._gone = False

    @property
    def ids(self) -> list[int]:
        return sorted(self._slots)

    @property
    def headless_ids(self) -> set[int]:
        return set()

    def slot(self, endpoint_id: int) -> EngineSlot:
        return self._slots[endpoint_id]

    def alive_ids(self) -> list[int]:
        return sorted(i for i, s in self._slots.items() if s.alive)

    def endpoint(self, endpoint_id: int) -> LocalEndpoint:
        s = self._slots[endpoint_id]
        return LocalEndpoint(endpoint_id, s.host, s.port, False, tuple(s.spec.device_infos))

    def endpoints(self, ids: Iterable[int] | None = None) -> list[LocalEndpoint]:
        return [self.endpoint(i) for i in (self.ids if ids is None else ids)]

    def address(self, endpoint_id: int) -> EngineAddress | None:
        s = self._slots.get(endpoint_id)
        return None if s is None else EngineAddress(endpoint_id, s.host, s.port)

    def spawn(self, ids: list[int], dp_master_ip: str, dp_master_port: int, request_id: str = "",
              ready_timeout_sec: float | None = None, join: bool = False) -> dict[int, str]:
        if self._gone:
            raise Unavailable("the NodeManager is gone")
        busy = [i for i in ids if self._slots[i].state in (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        if busy:
            raise FailedPrecondition(f"engines {busy} are already running; stop or relaunch them first")
        timeout = self._config.engine_ready_timeout_sec if ready_timeout_sec is None else ready_timeout_sec
        for i in ids:
            s = self._slots[i]
            s.run_id += 1
            self._pid += 1
            s.state, s.intentional, s.was_ready, s.note, s.returncode = RunState.STARTING, False, False, "", None
            s.proc = _Pid(self._pid)  # type: ignore[assignment]
            self._group.spawn(i, join)
            s.ready_task = asyncio.get_running_loop().create_task(self._await_ready(s, s.run_id, timeout))
        return {}

    async def wait_ready(self, ids: list[int]) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for i in ids:
            task = self._slots[i].ready_task
            out[i] = f"engine of rank {i} was not started" if task is None else await asyncio.shield(task)
        return out

    async def launch(self, ids: list[int], dp_master_ip: str, dp_master_port: int, request_id: str = "",
                     ready_timeout_sec: float | None = None) -> dict[int, str | None]:
        failed = self.spawn(ids, dp_master_ip, dp_master_port, request_id, ready_timeout_sec)
        return {**failed, **await self.wait_ready([i for i in ids if i not in failed])}

    async def _await_ready(self, s: EngineSlot, run_id: int, timeout_sec: float) -> str | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_sec
        while loop.time() < deadline:
            if s.run_id != run_id or s.state is not RunState.STARTING:
                return f"engine of rank {s.endpoint_id} ended before it was ready"
            if self._group.engines[s.endpoint_id].ready:
                s.state, s.was_ready = RunState.READY, True
                self._on_ready(s.endpoint_id, run_id)
                return None
            await asyncio.sleep(0.25)
        s.note = f"not ready within {timeout_sec:g}s"
        self.die(s.endpoint_id, -15)
        return s.note

    def die(self, endpoint_id: int, returncode: int = -9) -> None:
        """The process ended without being asked (killed, crashed, readiness timeout)."""
        s = self._slots[endpoint_id]
        if s.state not in (RunState.STARTING, RunState.READY):
            return
        self._group.stop(endpoint_id)
        s.state, s.returncode = RunState.EXITED, returncode
        self._on_exit(EngineExit(endpoint_id, s.run_id, s.pid or self._pid, returncode, False, s.was_ready, s.note))

    async def stop(self, ids: Iterable[int], grace_sec: float, reason: str, request_id: str = "") -> list[int]:
        targets = [self._slots[i] for i in ids
                   if self._slots[i].state in (RunState.STARTING, RunState.READY, RunState.STOPPING)]
        for s in targets:
            s.intentional, s.state = True, RunState.STOPPING
            self._on_stopping(s.endpoint_id)
        await asyncio.sleep(0.05)
        for s in targets:
            self._group.stop(s.endpoint_id)
            s.state = RunState.STOPPED
            self._on_exit(EngineExit(s.endpoint_id, s.run_id, 1, 0, True, s.was_ready))
        return sorted(s.endpoint_id for s in targets)

    async def stop_all(self, grace_sec: float, reason: str) -> list[int]:
        return await self.stop(self.ids, grace_sec, reason)

    def kill_all(self) -> None:
        """The pod's container went away: its engines die with it, without exit reports."""
        self._gone = True
        for s in self._slots.values():
            if s.ready_task is not None:
                s.ready_task.cancel()
            if s.state in (RunState.STARTING, RunState.READY, RunState.STOPPING):
                self._group.stop(s.endpoint_id)
            s.state = RunState.EXITED

    async def close(self, bound_sec: float) -> None:
        for s in self._slots.values():
            if s.ready_task is not None:
                s.ready_task.cancel()


class _Pid:
    def __init__(self, pid: int) -> None:
        self.pid = pid


# The instance FT manager's address in the simulated network (instance-level dialects only).
SIM_FT_MANAGER = ("10.0.0.250", 30000)


class SimEngineHttp:
    """EngineHttpClient's interface: answers are the engines' raw documents, parsed by the real parser."""

    def __init__(self, group: SimGroup, clock: Callable[[], float]) -> None:
        self._group, self._clock = group, clock
        # The NodeManager's own dialect module of the simulated engines' dialect reads every answer.
        self.dialect = make_dialect(group.dialect, len(group.engines), SIM_FT_MANAGER)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None, request_id: str = ""):
        await asyncio.sleep(0.01)
        raw = self._group.status_answer(addr.endpoint_id)
        if raw is None:
            raise EngineUnreachable(addr.endpoint_id, "connection refused")
        if addr.endpoint_id in self._group.hung:
            await asyncio.sleep(timeout_sec or 2.0)
            raise EngineTimeout(addr.endpoint_id, "status did not answer")
        return self.dialect.parse_status(addr.endpoint_id, 200, raw, self._clock(), request_id)

    async def apply(self, addr: EngineAddress, body: str, timeout_sec: float | None = None) -> ApplyOutcome:
        sent = self._clock()
        await asyncio.sleep(0.01)
        if not self._group.apply_reachable(addr.endpoint_id):
            return ApplyOutcome(addr.endpoint_id, False, 0, "", "connection refused", body, 0.01, sent)
        status, raw = self._group.apply(addr.endpoint_id, body)
        answer = self.dialect.parse_apply_answer(status, raw)
        return ApplyOutcome(addr.endpoint_id, answer.accepted, status, answer.engine_request_id, answer.message, body,
                            0.01, sent, answer.busy)
