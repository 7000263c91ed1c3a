"""NodeManagerAgent: the per-pod daemon wiring supervisor, FT poller, fault reporter, controller
link, FT proxy and engine lifecycle together (the servicers call into it).

Start-up: the initial launch of every local engine runs in the background (the gRPC server is
already serving); once it has ended the pod registers and heartbeats. Engine exits that were not
asked for are reported as ENGINE_DEAD once per run, unless the endpoint is retired. With
``exit_when_all_engines_dead`` the NodeManager exits (status 3) when every non-retired local engine
has died; that path is frozen while a scale-down guard is live.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gen.motor.v1 import common_pb2, controller_pb2
from motor.common.ports import free_port
from motor.common.security import client_tls
from motor.common.term_fence import TermFence
from nodemanager.config import NodeManagerConfig
from nodemanager.controller_client import ControllerClient
from nodemanager.controller_link import ControllerLink
from nodemanager.device_ids import check_device_ids
from nodemanager.endpoints import LocalEndpoint, check_endpoint_ids, check_instance
from nodemanager.engine_http import EngineHttpClient
from nodemanager.errors import DeadlineExceeded, InvalidArgument, Unavailable
from nodemanager.ft_poller import ENGINE_DEAD, EngineFtManager, FaultReport
from nodemanager.ft_proxy import FtProxy
from nodemanager.guard import GuardState
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.pod_state import PodState
from nodemanager.reporter import FaultReporter
from nodemanager.supervisor import EngineExit, ProcessSupervisor, RunState

log = logging.getLogger("nodemanager.agent")

EXIT_ALL_ENGINES_DEAD = 3
_WATCHDOG_SEC = 1.0
_MAX_GRACE_SEC = 3600.0
ROLES = {"prefill": common_pb2.ROLE_PREFILL, "decode": common_pb2.ROLE_DECODE, "union": common_pb2.ROLE_UNION}

ExitHook = Callable[[int, str], None]


@dataclass(frozen=True)
class EngineView:
    endpoint: LocalEndpoint
    pid: int
    running: bool
    exit_code: int
    retired: bool
    state: str


class NodeManagerAgent:
    def __init__(self, config: NodeManagerConfig, *, exit_hook: ExitHook, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._exit_hook = exit_hook
        self._instance = config.instance_id
        self.log_dir = Path(config.log_dir) if config.log_dir else Path(
            tempfile.mkdtemp(prefix=f"motor-nm-i{config.instance_id}-{config.pod_ip}-"))
        self.state = PodState(config.instance_id, config.fault_tolerance_config.enable_dp_scale_down_proxy)
        self.polling_enabled = config.fault_tolerance_config.enable_fault_tolerance and config.ft_capability.engine_ft_enabled
        self.guard = GuardState(clock)
        self.metrics = NodeManagerMetrics()
        self.http = EngineHttpClient(config.engine_ft_api_prefix, config.engine_request_timeout_sec)
        self.supervisor = ProcessSupervisor(config, self.log_dir, on_ready=self._on_ready, on_exit=self._on_exit,
                                            on_stopping=self._on_stopping)
        # The highest Controller leader term seen: FT and lifecycle calls of an older (deposed) one are refused.
        self.term_fence = TermFence(f"nodemanager pod={config.pod_ip}")
        self.controller = ControllerClient(config.controller_targets, timeout_sec=config.controller_request_timeout_sec,
                                           tls=client_tls(config.client_tls, config.security),
                                           on_term=lambda term: self.term_fence.observe(term, "controller answer"))
        self.reporter = FaultReporter(
            self.controller, pod_ip=config.pod_ip, instance_id=config.instance_id,
            queue_size=config.fault_report_queue_size, attempts=config.fault_report_attempts,
            hold_sec=config.fault_report_hold_sec,
            is_retired=self.state.is_retired, metrics=self.metrics,
        )
        self.poller = EngineFtManager(
            self.http, interval_sec=config.fault_tolerance_config.engine_status_poll_interval_sec,
            timeout_sec=config.engine_request_timeout_sec, address_of=self.supervisor.address,
            report=self.reporter.submit, instance_id=config.instance_id, still_polled=self._still_polled,
            defer_recovered=self.guard.is_live, metrics=self.metrics,
        )
        self.proxy = FtProxy(config, self.state, self.supervisor, self.http, self.guard, on_commit=self._on_commit,
                             on_taken=self.poller.taken, metrics=self.metrics)
        self.metrics.read_at_scrape(guard_live=self.guard.is_live, guard_remaining_sec=self.guard.remaining_sec,
                                    report_queue=lambda: self.reporter.pending, watched=lambda: len(self.poller.watched))
        self.link: ControllerLink | None = None
        self.grpc_address = ""
        self.dp_master_port = config.dp_master_port
        self.launched: asyncio.Event | None = None
        self._lifecycle_lock: asyncio.Lock | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[object]] = set()
        self._exiting = False
        self._suicide_frozen_logged = False

    # -- start / stop -----------------------------------------------------------------------
    async def start(self, grpc_address: str) -> None:
        self.grpc_address = grpc_address
        self.launched = asyncio.Event()
        self._lifecycle_lock = asyncio.Lock()
        await self.http.start()
        self.link = ControllerLink(
            self.controller, instance_id=self._instance, pod_ip=self.config.pod_ip,
            build_register=self.register_request, alive_ids=self.alive_ids, on_config=self._on_config,
            heartbeat_interval_sec=self.config.heartbeat_interval_sec,
            max_backoff_sec=self.config.controller_retry_max_backoff_sec,
            on_leader_change=self._on_leader_change,
        )
        # Reports made before the first registration wait for it instead of being refused.
        self.reporter.registered = self.link.registered
        self.reporter.start()
        log.info("instance=%d pod=%s NodeManager starting: engines %s, log_dir=%s, proxy=%s, polling=%s, controller=%s",
                 self._instance, self.config.pod_ip, self.supervisor.ids, self.log_dir, self.state.proxy_enabled,
                 self.polling_enabled, ",".join(self.config.controller_targets))
        self._tasks = [
            asyncio.create_task(self._initial_launch(), name="initial-launch"),
            asyncio.create_task(self.link.run(self.launched), name="controller-link"),
            asyncio.create_task(self._watchdog(), name="watchdog"),
        ]

    async def stop(self) -> None:
        self._exiting = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.poller.close()
        await self.supervisor.stop_all(self.config.engine_stop_grace_sec, "NodeManager stopping")
        await self.supervisor.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.reporter.close()
        await self.controller.close()
        await self.http.close()
        log.info("instance=%d pod=%s NodeManager stopped", self._instance, self.config.pod_ip)

    def _spawn_background(self, coro: object, name: str) -> None:
        task = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _master_port(self, requested: int = 0) -> int:
        if requested:
            return requested
        if self.config.dp_master_port:
            return self.config.dp_master_port
        return free_port(self.config.dp_master_ip)

    async def _initial_launch(self) -> None:
        assert self.launched is not None and self._lifecycle_lock is not None
        try:
            async with self._lifecycle_lock:
                self.dp_master_port = self._master_port()
                failed = self.supervisor.spawn(self.supervisor.ids, self.config.dp_master_ip, self.dp_master_port,
                                               "initial-launch")
            results = {**failed, **await self.supervisor.wait_ready([i for i in self.supervisor.ids if i not in failed])}
            bad = {i: why for i, why in results.items() if why}
            if bad:
                log.error("instance=%d initial launch: engines not ready: %s", self._instance, bad)
            else:
                log.info("instance=%d initial launch: every engine ready %s", self._instance, self.supervisor.ids)
        finally:
            self.launched.set()

    # -- events -----------------------------------------------------------------------------
    def _on_ready(self, endpoint_id: int, run_id: int) -> None:
        if self.polling_enabled and not self.state.is_retired(endpoint_id) \
                and not self.supervisor.slot(endpoint_id).spec.headless:
            self.poller.watch(endpoint_id)
        if self.link is not None:
            self.link.poke()

    def _still_polled(self, endpoint_id: int) -> bool:
        return self.supervisor.slot(endpoint_id).state is RunState.READY and not self.state.is_retired(endpoint_id)

    def _on_stopping(self, endpoint_id: int) -> None:
        self.poller.unwatch(endpoint_id)
        if self.link is not None:
            self.link.poke()

    def _on_exit(self, ev: EngineExit) -> None:
        self.metrics.engine_exit(ev.intentional)
        self.poller.unwatch(ev.endpoint_id)
        if self.link is not None:
            self.link.poke()
        if ev.intentional or self._exiting:
            return
        if self.state.is_retired(ev.endpoint_id):
            log.info("instance=%d rank=%d exit of retired engine not reported: %s", self._instance, ev.endpoint_id,
                     ev.description)
            return
        self.reporter.submit(FaultReport(ev.endpoint_id, ENGINE_DEAD, ev.description, None, time.time()))
        self._check_all_dead()

    def _on_commit(self, newly_retired: list[int], request_id: str) -> None:
        for i in newly_retired:
            self.poller.unwatch(i)
        self.poller.rearm([i for i in self.poller.watched if i not in newly_retired])
        if not newly_retired:
            return
        if self.link is not None:
            self.link.poke()
        self._spawn_background(
            self.supervisor.stop(newly_retired, self.config.engine_stop_grace_sec, "retired by scale-down", request_id),
            f"stop-retired-{request_id}",
        )

    def _on_leader_change(self, term: int) -> None:
        """Another Controller replica leads now (term `term`): what it may never have received is
        reported again: every polled engine's current fault, and the death of every engine that died."""
        self.poller.rearm(self.poller.watched)
        dead = [i for i in self.supervisor.ids
                if self.supervisor.slot(i).state is RunState.EXITED and not self.state.is_retired(i)]
        for i in dead:
            self.reporter.submit(FaultReport(i, ENGINE_DEAD, f"engine exited (reported again to the leader of "
                                             f"term {term})", None, time.time()))
        log.info("instance=%d pod=%s leader term %d: polled engines re-armed %s, dead engines reported again %s",
                 self._instance, self.config.pod_ip, term, self.poller.watched, dead)

    def _on_config(self, cfg: controller_pb2.NodeManagerFtConfig, source: str) -> None:
        if self.state.set_proxy(cfg.enable_dp_scale_down_proxy, f"controller {source}") and not cfg.enable_dp_scale_down_proxy:
            dropped = self.guard.clear()
            if dropped:
                log.warning("instance=%d request_id=%s guard dropped: the proxy was switched off", self._instance,
                            dropped)

    # -- suicide ----------------------------------------------------------------------------
    def all_engines_dead(self) -> bool:
        """Every non-retired local engine has died (not stopped on purpose); False when all are retired."""
        ids = [i for i in self.supervisor.ids if not self.state.is_retired(i)]
        return bool(ids) and all(self.supervisor.slot(i).state is RunState.EXITED for i in ids)

    def _check_all_dead(self) -> None:
        if not self.config.exit_when_all_engines_dead or self._exiting or not self.all_engines_dead():
            self._suicide_frozen_logged = False
            return
        holder = self.guard.live_holder()
        if holder is not None:
            if not self._suicide_frozen_logged:
                log.warning("instance=%d request_id=%s every engine is dead, but the guard is live (%.1fs left): "
                            "not exiting", self._instance, holder, self.guard.remaining_sec())
                self._suicide_frozen_logged = True
            return
        self._exiting = True
        reason = f"every non-retired local engine {[i for i in self.supervisor.ids if not self.state.is_retired(i)]} died"
        log.error("instance=%d pod=%s %s: exiting (exit_when_all_engines_dead)", self._instance, self.config.pod_ip,
                  reason)
        self._exit_hook(EXIT_ALL_ENGINES_DEAD, reason)

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(_WATCHDOG_SEC)
            self._check_all_dead()

    # -- controller views -------------------------------------------------------------------
    def alive_ids(self) -> list[int]:
        return self.state.alive_for_heartbeat(self.supervisor.alive_ids())

    def register_request(self) -> controller_pb2.RegisterRequest:
        c = self.config
        # The device ids must be this pod's cards (RFC §4.2 maps hardware faults by them): a mismatch
        # raises DeviceIdMismatch, this attempt fails and is retried (logged by the link).
        log.debug("instance=%d pod=%s %s", c.instance_id, c.pod_ip,
                  check_device_ids(c.pod_annotations_file, [d.device_id for e in c.engines for d in e.device_infos]))
        cap = c.ft_capability
        return controller_pb2.RegisterRequest(
            pod=self.pod_pb(),
            instance_id=c.instance_id,
            role=ROLES[c.role],
            model=c.model,
            dp_size=c.dp_size,
            endpoints=[e.to_pb() for e in self.supervisor.endpoints()],
            ft_capability=common_pb2.FtCapability(
                engine_ft_enabled=cap.engine_ft_enabled, scale_down_supported=cap.scale_down_supported,
                external_lb=cap.external_lb, auto_recovery=cap.auto_recovery, enable_eplb=cap.enable_eplb,
                num_redundant_experts=cap.num_redundant_experts,
            ),
            retired_ids=sorted(self.state.retired),
        )

    def pod_pb(self) -> common_pb2.Pod:
        return common_pb2.Pod(pod_ip=self.config.pod_ip, node_name=self.config.node_name,
                              node_manager_address=self.grpc_address, endpoint_ids=self.supervisor.ids,
                              dp_store_port_base=self.config.dp_store_port_base)

    # -- lifecycle --------------------------------------------------------------------------
    def _grace(self, grace_sec: float) -> float:
        if grace_sec == 0:
            return self.config.engine_stop_grace_sec
        if not math.isfinite(grace_sec) or not 0 < grace_sec <= _MAX_GRACE_SEC:
            raise InvalidArgument(f"grace_sec={grace_sec!r} is not in [0, {_MAX_GRACE_SEC:g}] (0: the default "
                                  f"{self.config.engine_stop_grace_sec:g}s)")
        return grace_sec

    def _master_ip(self, dp_master_ip: str, dp_master_port: int) -> str:
        """The checked master ip (empty: the configured one); the port is only range-checked."""
        ip = dp_master_ip or self.config.dp_master_ip
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise InvalidArgument(f"dp_master_ip {dp_master_ip!r} is not an IP address") from None
        if not 0 <= dp_master_port <= 65535:
            raise InvalidArgument(f"dp_master_port {dp_master_port} is not a port (0: the configured one)")
        return ip

    async def _wait_launched(self, ids: list[int], failed: dict[int, str], request_id: str,
                             timeout_sec: float | None) -> list[LocalEndpoint]:
        waiting = asyncio.ensure_future(self.supervisor.wait_ready([i for i in ids if i not in failed]))
        try:
            results = await asyncio.wait_for(asyncio.shield(waiting), timeout_sec) if timeout_sec else await waiting
        except TimeoutError:
            raise DeadlineExceeded(
                f"engines {ids} started (request_id {request_id!r}) but not all ready within the call's deadline "
                f"({timeout_sec:.1f}s); they keep starting (engine_ready_timeout_sec="
                f"{self.config.engine_ready_timeout_sec:g})"
            ) from None
        bad = {**failed, **{i: why for i, why in results.items() if why}}
        if bad:
            raise Unavailable(f"engines not ready (request_id {request_id!r}): " + "; ".join(
                f"rank {i}: {why}" for i, why in sorted(bad.items())))
        return self.supervisor.endpoints(ids)

    async def start_engines(self, *, instance_id: int, request_id: str, dp_master_ip: str, dp_master_port: int,
                            endpoint_ids: list[int], timeout_sec: float | None = None) -> list[LocalEndpoint]:
        check_instance(instance_id, self._instance)
        ids = check_endpoint_ids(endpoint_ids, local=self.supervisor.ids, allow_empty=True, allow_headless=True,
                                 allow_retired=True) or self.supervisor.ids
        ip = self._master_ip(dp_master_ip, dp_master_port)
        assert self._lifecycle_lock is not None
        async with self._lifecycle_lock:  # spawning is serialised; readiness is awaited outside the lock
            port = self._master_port(dp_master_port)
            failed = self.supervisor.spawn(ids, ip, port, request_id)
            back = self.state.unretire(ids)
            self.dp_master_port = port
            self._drop_guard_for_new_group(ids, request_id)
        log.info("instance=%d request_id=%s start engines %s master=%s:%d (retired flag cleared for %s)",
                 self._instance, request_id or "-", ids, ip, port, back)
        return await self._wait_launched(ids, failed, request_id, timeout_sec)

    async def stop_engines(self, *, instance_id: int, request_id: str, grace_sec: float,
                           endpoint_ids: list[int]) -> list[int]:
        check_instance(instance_id, self._instance)
        ids = check_endpoint_ids(endpoint_ids, local=self.supervisor.ids, allow_empty=True, allow_headless=True,
                                 allow_retired=True) or self.supervisor.ids
        grace = self._grace(grace_sec)
        assert self._lifecycle_lock is not None
        async with self._lifecycle_lock:
            stopped = await self.supervisor.stop(ids, grace, "StopEngines", request_id)
        log.info("instance=%d request_id=%s stop engines %s: stopped %s", self._instance, request_id or "-", ids, stopped)
        return stopped

    async def relaunch_engines(self, *, instance_id: int, request_id: str, dp_master_ip: str, dp_master_port: int,
                               grace_sec: float, timeout_sec: float | None = None) -> list[LocalEndpoint]:
        check_instance(instance_id, self._instance)
        grace = self._grace(grace_sec)
        ip = self._master_ip(dp_master_ip, dp_master_port)
        ids = self.supervisor.ids
        assert self._lifecycle_lock is not None
        async with self._lifecycle_lock:
            stopped = await self.supervisor.stop(ids, grace, "RelaunchEngines", request_id)
            port = self._master_port(dp_master_port)  # after the stop: the old store port is free again
            failed = self.supervisor.spawn(ids, ip, port, request_id)
            back = self.state.unretire(ids)
            self.dp_master_port = port
            self._drop_guard_for_new_group(ids, request_id)
        log.info("instance=%d request_id=%s relaunch engines %s (stopped %s, retired flag cleared for %s) "
                 "master=%s:%d", self._instance, request_id or "-", ids, stopped, back, ip, port)
        return await self._wait_launched(ids, failed, request_id, timeout_sec)

    def _drop_guard_for_new_group(self, ids: list[int], request_id: str) -> None:
        """Every local engine starting into a new DP group voids any scale-down transaction on the old
        one (e.g. a round interrupted by a Controller restart): its guard must not block the next round."""
        if sorted(ids) != sorted(self.supervisor.ids):
            return
        dropped = self.guard.clear()
        if dropped:
            log.warning("instance=%d request_id=%s guard of %s dropped: every engine restarts into a new DP group",
                        self._instance, request_id or "-", dropped)

    def stop_pod(self, request_id: str, reason: str) -> None:
        log.warning("instance=%d pod=%s request_id=%s StopPod (%s): stopping engines and exiting", self._instance,
                    self.config.pod_ip, request_id or "-", reason or "no reason given")
        self._exiting = True
        self._exit_hook(0, f"StopPod request_id={request_id!r} reason={reason!r}")

    def describe(self) -> list[EngineView]:
        views = []
        for i in self.supervisor.ids:
            s = self.supervisor.slot(i)
            views.append(EngineView(
                endpoint=self.supervisor.endpoint(i), pid=s.pid, running=s.alive,
                exit_code=s.returncode if s.returncode is not None else 0,
                retired=self.state.is_retired(i), state=s.state.value,
            ))
        return views
