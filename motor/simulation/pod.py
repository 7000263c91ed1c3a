"""One simulated pod: the REAL NodeManager fault-tolerance parts over simulated processes.

Composed as `nodemanager.agent.NodeManagerAgent` composes them (PodState, GuardState, the FT poller
`EngineFtManager` with its `FaultDeduper`, `FaultReporter`, `ControllerLink`, `FtProxy`,
`EngineLifecycle`), with the same callbacks; only the process supervisor and the engine HTTP client
are simulated (`SimSupervisor`, `SimEngineHttp`), and the Controller client is the in-memory
transport. The agent builds its supervisor and clients itself, hence this composition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from gen.motor.v1 import common_pb2, controller_pb2
from motor.common.term_fence import TermFence
from nodemanager.config import NodeManagerConfig
from nodemanager.controller_link import ControllerLink
from nodemanager.endpoints import LocalEndpoint
from nodemanager.engine_answers import EngineTimeout, EngineUnreachable, parse_apply_answer, parse_status
from nodemanager.engine_http import ApplyOutcome, EngineAddress
from nodemanager.engine_lifecycle import EngineLifecycle
from nodemanager.errors import FailedPrecondition
from nodemanager.ft_poller import ENGINE_DEAD, EngineFtManager, FaultReport
from nodemanager.ft_proxy import FtProxy
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState
from nodemanager.reporter import FaultReporter
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
              ready_timeout_sec: float | None = None) -> dict[int, str]:
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
            self._group.spawn(i)
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
        for s in self._slots.values():
            if s.ready_task is not None:
                s.ready_task.cancel()
            if s.state in (RunState.STARTING, RunState.READY, RunState.STOPPING):
                self._group.stop(s.endpoint_id)
            s.state = RunState.EXITED

    async def close(self) -> None:
        for s in self._slots.values():
            if s.ready_task is not None:
                s.ready_task.cancel()


class _Pid:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class SimEngineHttp:
    """EngineHttpClient's interface: answers are the engines' raw documents, parsed by the real parser."""

    def __init__(self, group: SimGroup, clock: Callable[[], float]) -> None:
        self._group, self._clock = group, clock

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def read_status(self, addr: EngineAddress, timeout_sec: float | None = None):
        await asyncio.sleep(0.01)
        eng = self._group.engines[addr.endpoint_id]
        if not eng.process_up:
            raise EngineUnreachable(addr.endpoint_id, "connection refused")
        if addr.endpoint_id in self._group.hung:
            await asyncio.sleep(timeout_sec or 2.0)
            raise EngineTimeout(addr.endpoint_id, "status did not answer")
        return parse_status(addr.endpoint_id, 200, eng.document(self._group.dialect), self._clock())

    async def apply(self, addr: EngineAddress, body: str, timeout_sec: float | None = None) -> ApplyOutcome:
        sent = self._clock()
        await asyncio.sleep(0.01)
        if not self._group.engines[addr.endpoint_id].process_up:
            return ApplyOutcome(addr.endpoint_id, False, 0, "", "connection refused", body, 0.01, sent)
        status, raw = self._group.apply(addr.endpoint_id, body)
        accepted, rid, message = parse_apply_answer(status, raw)
        return ApplyOutcome(addr.endpoint_id, accepted, status, rid, message, body, 0.01, sent)


class SimNodeManager:
    """The NodeManager of one pod: real FT parts, simulated processes and engine API."""

    def __init__(self, config: NodeManagerConfig, group: SimGroup, controller, *, monotonic: Callable[[], float],
                 wall: Callable[[], float], address: str, retired: Iterable[int] = ()) -> None:
        self.config, self.address, self._wall = config, address, wall
        self.state = PodState(config.instance_id, config.fault_tolerance_config.enable_dp_scale_down_proxy)
        self.state.retire(retired)
        self.guard = GuardState(monotonic)
        self.http = SimEngineHttp(group, wall)
        self.supervisor = SimSupervisor(config, group, on_ready=self._on_ready, on_exit=self._on_exit,
                                        on_stopping=self._on_stopping)
        self.engines = EngineLifecycle(config, self.supervisor, self.state, self.guard)  # type: ignore[arg-type]
        self.controller = controller
        # The highest Controller leader term seen (calls of an older, deposed one are refused), fed by
        # the leader's answers as the agent's ControllerClient feeds it.
        self.term_fence = TermFence(f"nodemanager pod={config.pod_ip}")
        controller.on_term = lambda term: self.term_fence.observe(term, "controller answer")
        registered = asyncio.Event()
        self.link = ControllerLink(
            controller, instance_id=config.instance_id, pod_ip=config.pod_ip, build_register=self.register_request,
            alive_ids=lambda: self.state.alive_for_heartbeat(self.supervisor.alive_ids()), on_config=self._on_config,
            heartbeat_interval_sec=config.heartbeat_interval_sec,
            max_backoff_sec=config.controller_retry_max_backoff_sec,
            on_renewed=self._on_controller_renewed, registered=registered,
        )
        self.reporter = FaultReporter(
            controller, pod_ip=config.pod_ip, instance_id=config.instance_id,
            queue_size=config.fault_report_queue_size, attempts=config.fault_report_attempts,
            hold_sec=config.fault_report_hold_sec, retry_max_sec=config.controller_retry_max_backoff_sec,
            registered=registered, is_retired=self.state.is_retired, clock=monotonic,
            on_dropped=lambda endpoint_id: self.poller.rearm([endpoint_id]),
        )
        self.poller = EngineFtManager(
            self.http,  # type: ignore[arg-type]
            interval_sec=config.fault_tolerance_config.engine_status_poll_interval_sec,
            timeout_sec=config.engine_request_timeout_sec, address_of=self.supervisor.address,
            report=self.reporter.submit, instance_id=config.instance_id, still_polled=self._still_polled,
            defer_recovered=self.guard.is_live,
        )
        self.proxy = FtProxy(config, self.state, self.supervisor, self.http, self.guard,  # type: ignore[arg-type]
                             on_commit=self._on_commit, on_taken=self.poller.taken)
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[object]] = set()
        # What the Controller asked of this pod (the invariants read them).
        self.applies_seen: list[str] = []
        self.stopped_by = ""

    def start(self) -> None:
        self.reporter.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.engines.initial_launch()),
                       loop.create_task(self.link.run(self.engines.launched))]

    async def crash(self) -> None:
        """The NodeManager's container ends: its tasks stop, its engines die with it."""
        for task in self._tasks + list(self._background):
            task.cancel()
        await self.poller.close()
        self.supervisor.kill_all()
        await self.supervisor.close()
        await self.reporter.close()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)

    # -- the agent's callbacks (nodemanager/agent.py) ----------------------------------------
    def _on_ready(self, endpoint_id: int, run_id: int) -> None:
        if not self.state.is_retired(endpoint_id):
            self.poller.watch(endpoint_id)
        self.link.poke()

    def _still_polled(self, endpoint_id: int) -> bool:
        return self.supervisor.slot(endpoint_id).state is RunState.READY and not self.state.is_retired(endpoint_id)

    def _on_stopping(self, endpoint_id: int) -> None:
        self.poller.unwatch(endpoint_id)
        self.link.poke()

    def _on_exit(self, ev: EngineExit) -> None:
        self.poller.unwatch(ev.endpoint_id)
        self.link.poke()
        if ev.intentional or self.state.is_retired(ev.endpoint_id):
            return
        self.reporter.submit(FaultReport(ev.endpoint_id, ENGINE_DEAD, ev.description, None, self._wall()))

    def _on_commit(self, newly_retired: list[int], request_id: str) -> None:
        for i in newly_retired:
            self.poller.unwatch(i)
        self.poller.rearm([i for i in self.poller.watched if i not in newly_retired])
        if not newly_retired:
            return
        self.link.poke()
        task = asyncio.get_running_loop().create_task(
            self.supervisor.stop(newly_retired, self.config.engine_stop_grace_sec, "retired by scale-down", request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_controller_renewed(self, reason: str) -> None:
        self.reporter.retry_now()
        self.poller.rearm(self.poller.watched)
        for i in self.supervisor.ids:
            if self.supervisor.slot(i).state is RunState.EXITED and not self.state.is_retired(i):
                self.reporter.submit(FaultReport(i, ENGINE_DEAD, f"engine exited (reported again: {reason})", None,
                                                 self._wall()))

    def _on_config(self, cfg: controller_pb2.NodeManagerFtConfig, source: str) -> None:
        if self.state.set_proxy(cfg.enable_dp_scale_down_proxy, f"controller {source}") and \
                not cfg.enable_dp_scale_down_proxy:
            self.guard.clear()

    def register_request(self) -> controller_pb2.RegisterRequest:
        c = self.config
        cap = c.ft_capability
        return controller_pb2.RegisterRequest(
            pod=common_pb2.Pod(pod_ip=c.pod_ip, node_name=c.node_name, node_manager_address=self.address,
                               endpoint_ids=self.supervisor.ids, dp_store_port_base=c.dp_store_port_base),
            instance_id=c.instance_id, role=common_pb2.ROLE_UNION, model=c.model, dp_size=c.dp_size,
            endpoints=[e.to_pb() for e in self.supervisor.endpoints()],
            ft_capability=common_pb2.FtCapability(
                engine_ft_enabled=cap.engine_ft_enabled, scale_down_supported=cap.scale_down_supported,
                external_lb=cap.external_lb, auto_recovery=cap.auto_recovery, enable_eplb=cap.enable_eplb,
                num_redundant_experts=cap.num_redundant_experts),
            retired_ids=sorted(self.state.retired),
        )
