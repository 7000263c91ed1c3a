"""NodeManagerAgent: the per-pod composition root. It builds the process supervisor, FT poller,
fault reporter, controller link, FT proxy, engine lifecycle and exit policy, wires what each one
sees to the others, and starts and stops them (the servicers call into the parts).

What touches the outside world comes in through the constructor, the production one by default:
the process supervisor (a factory, since it calls back into the agent), the engine HTTP client, the
Controller client (a factory, given the term fence's observer), the clock, where the StopPod
record is kept and the random generator of the retries' jitter. `motor.simulation` composes this
same agent over simulated processes and engines.

Start-up: the initial launch of every local engine runs in the background (the gRPC server is
already serving); once it has ended the pod registers and heartbeats. Engine exits that were not
asked for are reported as ENGINE_DEAD once per run, unless the endpoint is retired (a joiner of a
scale-up is reported like any engine), and may end the pod (`exit_policy`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gen.motor.v1 import common_pb2, controller_pb2
from nodemanager.config import NodeManagerConfig
from motor.common.security import client_tls
from motor.common.term_fence import FileTermStorage, TermFence, TermStorage
from motor.common.waiting import end_tasks
from nodemanager.clock import SYSTEM_CLOCK, Clock
from nodemanager.controller_client import ControllerClient
from nodemanager.controller_link import ControllerLink
from nodemanager.device_ids import check_device_ids
from nodemanager.dialects import dialect_of
from nodemanager.engine_http import EngineHttpClient
from nodemanager.engine_lifecycle import EngineLifecycle
from nodemanager.exit_policy import ExitHook, ExitPolicy
from nodemanager.ft_poller import ENGINE_DEAD, EngineFtManager, FaultReport
from nodemanager.ft_proxy import FtProxy
from nodemanager.guard import GuardState
from nodemanager.metrics import NodeManagerMetrics
from nodemanager.pod_state import PodState
from nodemanager.pod_stop import FileStopStorage, PodStopRecord, StopStorage
from nodemanager.reporter import FaultReporter
from nodemanager.supervisor import EngineExit, ProcessSupervisor, RunState

log = logging.getLogger("nodemanager.agent")

# How long a stop waits for a cancelled task to end before it goes on without it (logged).
_TASK_END_BOUND_SEC = 5.0

ROLES = {"prefill": common_pb2.ROLE_PREFILL, "decode": common_pb2.ROLE_DECODE, "union": common_pb2.ROLE_UNION}


class SupervisorFactory(Protocol):
    """Builds the process supervisor around the agent's callbacks."""

    def __call__(self, *, on_ready: Callable[[int, int], None], on_exit: Callable[[EngineExit], None],
                 on_stopping: Callable[[int], None]) -> ProcessSupervisor: ...


# Builds the Controller client; its argument sees the leader term of every answer (the term fence).
ControllerFactory = Callable[[Callable[[int], None]], ControllerClient]


class NodeManagerAgent:
    def __init__(self, config: NodeManagerConfig, *, exit_hook: ExitHook, clock: Clock = SYSTEM_CLOCK,
                 supervisor: SupervisorFactory | None = None, http: EngineHttpClient | None = None,
                 controller: ControllerFactory | None = None, stop_storage: StopStorage | None = None,
                 term_storage: TermStorage | None = None, rng: random.Random | None = None) -> None:
        """Left out, `supervisor` runs engine processes with their logs in `log_dir`, `http` is an
        aiohttp client, `controller` the gRPC client of the configured replicas, `stop_storage`
        the file in `log_dir` (a fresh temporary directory when none is configured), `term_storage`
        (the highest leader term seen) the file in `log_dir` (kept in memory only without one) and `rng`, the
        jitter of the retries towards the Controller, the process's random generator."""
        self.config = config
        self._instance = config.instance_id
        self._clock = clock
        jitter = (rng or random).random
        self.log_dir = Path(config.log_dir) if config.log_dir else None
        self.state = PodState(config.instance_id, config.fault_tolerance_config.enable_dp_scale_down_proxy)
        self.polling_enabled = config.fault_tolerance_config.enable_fault_tolerance and config.ft_capability.engine_ft_enabled
        self.guard = GuardState(clock.monotonic)
        # The highest Controller leader term seen, kept across restarts beside the stop record: FT and
        # lifecycle calls of an older (deposed) leader, or of none once a term was seen, are refused.
        if term_storage is None and self.log_dir is not None:
            term_storage = FileTermStorage(self.log_dir)
        self.term_fence = TermFence(f"nodemanager pod={config.pod_ip}", term_storage)
        self.metrics = NodeManagerMetrics()
        self.http = http or EngineHttpClient(config.engine_ft_api_prefix, config.engine_request_timeout_sec, clock,
                                             dialect=dialect_of(config), metrics=self.metrics)
        build_supervisor = supervisor or (
            lambda **callbacks: ProcessSupervisor(config, self._own_log_dir(), **callbacks))
        self.supervisor = build_supervisor(on_ready=self._on_ready, on_exit=self._on_exit,
                                           on_stopping=self._on_stopping)
        # A StopPod obeyed by an earlier run of this pod: its ranks stay retired (pod_stop).
        self.stop_record = PodStopRecord(stop_storage or FileStopStorage(self._own_log_dir()),
                                         instance_id=config.instance_id, local_ids=self.supervisor.ids, wall=clock.wall)
        stopped = self.stop_record.load()
        if stopped is not None:
            self.state.retire(stopped.ranks)
            log.warning("instance=%d pod=%s stopped by StopPod request_id=%s (%s) at %s: ranks %s stay retired "
                        "until the Controller starts them again", self._instance, config.pod_ip,
                        stopped.request_id or "-", stopped.reason or "no reason given",
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stopped.stopped_at_unix_sec)),
                        list(stopped.ranks))
        if config.replacement_pod:
            self.state.retire(self.supervisor.ids)
            log.warning("instance=%d pod=%s is a replacement pod: ranks %s are registered retired and launched only "
                        "when the Controller starts them (capacity restoration)", self._instance, config.pod_ip,
                        self.supervisor.ids)
        self.engines = EngineLifecycle(config, self.supervisor, self.state, self.guard, self.stop_record, clock.wall)
        self.exit_policy = ExitPolicy(config, self.supervisor, self.state, self.guard, exit_hook, self.stop_record)
        build_controller = controller or (lambda on_term: ControllerClient(
            config.controller_targets, timeout_sec=config.controller_request_timeout_sec,
            tls=client_tls(config.client_tls, config.security), on_term=on_term))
        self.controller = build_controller(lambda term: self.term_fence.observe(term, "controller answer"))
        # Reports made before the first registration wait for it instead of being refused.
        registered = asyncio.Event()
        self.link = ControllerLink(
            self.controller, instance_id=self._instance, pod_ip=config.pod_ip,
            build_register=self.register_request, alive_ids=self.alive_ids, on_config=self._on_config,
            heartbeat_interval_sec=config.heartbeat_interval_sec,
            max_backoff_sec=config.controller_retry_max_backoff_sec,
            on_renewed=self._on_controller_renewed, registered=registered, jitter=jitter,
        )
        self.reporter = FaultReporter(
            self.controller, pod_ip=config.pod_ip, instance_id=config.instance_id,
            queue_size=config.fault_report_queue_size, attempts=config.fault_report_attempts,
            hold_sec=config.fault_report_hold_sec, retry_max_sec=config.controller_retry_max_backoff_sec,
            registered=registered, is_retired=self._unreported, metrics=self.metrics,
            on_dropped=lambda endpoint_id: self.poller.rearm([endpoint_id]), clock=clock.monotonic, jitter=jitter,
        )
        self.poller = EngineFtManager(
            self.http, interval_sec=config.fault_tolerance_config.engine_status_poll_interval_sec,
            timeout_sec=config.engine_request_timeout_sec,
            address_of=lambda i: self.http.dialect.ft_address(i, self.supervisor.address),
            report=self.reporter.submit, instance_id=config.instance_id, still_polled=self._still_polled,
            defer_recovered=self.guard.is_live, metrics=self.metrics, clock=clock,
        )
        self.proxy = FtProxy(config, self.state, self.supervisor, self.http, self.guard, on_commit=self._on_commit,
                             on_taken=self.poller.taken, on_scale_up_commit=self._on_scale_up_commit,
                             on_abort=self._on_abort, metrics=self.metrics, clock=clock,
                             current_term=lambda: self.term_fence.term)
        self.metrics.read_at_scrape(guard_live=self.guard.is_live, guard_remaining_sec=self.guard.remaining_sec,
                                    report_queue=lambda: self.reporter.pending, watched=lambda: len(self.poller.watched),
                                    stopped_ranks=lambda: len(self.stop_record.stopped))
        self.grpc_address = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[object]] = set()

    def _own_log_dir(self) -> Path:
        """The engines' logs and the stop record's directory: configured, or a fresh temporary one."""
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix=f"motor-nm-i{self._instance}-{self.config.pod_ip}-"))
        return self.log_dir

    # -- start / stop -----------------------------------------------------------------------
    async def start(self, grpc_address: str) -> None:
        self.grpc_address = grpc_address
        await self.http.start()
        self.reporter.start()
        log.info("instance=%d pod=%s NodeManager starting: engines %s, log_dir=%s, proxy=%s, polling=%s, controller=%s",
                 self._instance, self.config.pod_ip, self.supervisor.ids, self.log_dir, self.state.proxy_enabled,
                 self.polling_enabled, ",".join(self.config.controller_targets))
        self._tasks = [
            asyncio.create_task(self.engines.initial_launch(), name="initial-launch"),
            asyncio.create_task(self.link.run(self.engines.launched), name="controller-link"),
            asyncio.create_task(self.exit_policy.watchdog(), name="watchdog"),
        ]

    async def stop(self) -> None:
        """Stops the pod's work, then its engines. Every wait is bounded, and the engines are stopped
        whatever came before: a NodeManager that stops must not leave them running."""
        self.exit_policy.expect_exits()
        label = f"instance={self._instance} pod={self.config.pod_ip} stop"
        try:
            await end_tasks(self._tasks, _TASK_END_BOUND_SEC, label)
            await self.poller.close(_TASK_END_BOUND_SEC)
        finally:
            await self.supervisor.stop_all(self.config.engine_stop_grace_sec, "NodeManager stopping")
        await self.supervisor.close(_TASK_END_BOUND_SEC)
        await end_tasks(list(self._background), _TASK_END_BOUND_SEC, label)
        await self.reporter.close()
        await self.controller.close()
        await self.http.close()
        log.info("instance=%d pod=%s NodeManager stopped", self._instance, self.config.pod_ip)

    def _spawn_background(self, coro: object, name: str) -> None:
        task = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- events -----------------------------------------------------------------------------
    def _on_ready(self, endpoint_id: int, run_id: int) -> None:
        if self.polling_enabled and not self.state.is_retired(endpoint_id) \
                and not self.supervisor.slot(endpoint_id).spec.headless:
            self.poller.watch(endpoint_id)
        self.link.poke()

    def _still_polled(self, endpoint_id: int) -> bool:
        return self.supervisor.slot(endpoint_id).state is RunState.READY and not self.state.is_retired(endpoint_id)

    def _on_stopping(self, endpoint_id: int) -> None:
        self.poller.unwatch(endpoint_id)
        self.link.poke()

    def _unreported(self, endpoint_id: int) -> bool:
        """Faults of retired engines are not reported; a joiner's are (its round must see them)."""
        return self.state.is_retired(endpoint_id) and not self.state.is_joining(endpoint_id)

    def _on_exit(self, ev: EngineExit) -> None:
        self.metrics.engine_exit(ev.intentional)
        self.poller.unwatch(ev.endpoint_id)
        self.link.poke()
        if self.state.is_joining(ev.endpoint_id):
            # A dead joiner stays its round's until the round ends: the round reads it unreachable.
            if ev.intentional:
                self.state.end_join([ev.endpoint_id])
            elif not self.exit_policy.exiting:
                log.error("instance=%d rank=%d joiner died before its scale-up committed: %s", self._instance,
                          ev.endpoint_id, ev.description)
                self.reporter.submit(FaultReport(ev.endpoint_id, ENGINE_DEAD, ev.description, None,
                                                 self._clock.wall()))
            return
        if ev.intentional or self.exit_policy.exiting:
            return
        if self.state.is_retired(ev.endpoint_id):
            log.info("instance=%d rank=%d exit of retired engine not reported: %s", self._instance, ev.endpoint_id,
                     ev.description)
            return
        self.reporter.submit(FaultReport(ev.endpoint_id, ENGINE_DEAD, ev.description, None, self._clock.wall()))
        self.exit_policy.check()

    def _on_commit(self, newly_retired: list[int], request_id: str) -> None:
        for i in newly_retired:
            self.poller.unwatch(i)
        self.poller.rearm([i for i in self.poller.watched if i not in newly_retired])
        if not newly_retired:
            return
        self.link.poke()
        self._spawn_background(
            self.supervisor.stop(newly_retired, self.config.engine_stop_grace_sec, "retired by scale-down", request_id),
            f"stop-retired-{request_id}",
        )

    def _on_scale_up_commit(self, joined: list[int], request_id: str) -> None:
        """A scale-up committed: its joiners are ordinary engines of the grown group now (polled,
        heartbeated, out of the stop record); one that is not running any more is reported dead."""
        self.engines.release_stop(joined)
        for i in joined:
            if self.supervisor.slot(i).state is RunState.READY:
                if self.polling_enabled:
                    self.poller.watch(i)
            else:
                self.reporter.submit(FaultReport(i, ENGINE_DEAD, "joiner not running when its scale-up committed",
                                                 None, self._clock.wall()))
        self.poller.rearm(self.poller.watched)
        self.link.poke()

    def _on_abort(self, request_id: str) -> None:
        """A round aborted: the joiners it started join nothing; they are stopped (still retired)."""
        joiners = self.state.joiners_of(request_id)
        if not joiners:
            return
        self.state.end_join(joiners)
        log.warning("instance=%d request_id=%s scale-up aborted: stopping joiners %s", self._instance, request_id,
                    joiners)
        self._spawn_background(
            self.supervisor.stop(joiners, self.config.engine_stop_grace_sec, "scale-up aborted", request_id),
            f"stop-joiners-{request_id}",
        )

    def _on_controller_renewed(self, reason: str) -> None:
        """The Controller may hold none of what this pod told it (`reason`: it restarted, forgot the
        pod, or another replica leads): what is owed is tried at once, every polled engine's current
        fault is reported again at its next poll, and the death of every engine that died now."""
        self.reporter.retry_now()
        self.poller.rearm(self.poller.watched)
        dead = [i for i in self.supervisor.ids
                if self.supervisor.slot(i).state is RunState.EXITED and not self.state.is_retired(i)]
        for i in dead:
            self.reporter.submit(FaultReport(i, ENGINE_DEAD, f"engine exited (reported again: {reason})", None,
                                             self._clock.wall()))
        log.info("instance=%d pod=%s %s: polled engines re-armed %s, dead engines reported again %s",
                 self._instance, self.config.pod_ip, reason, self.poller.watched, dead)

    def _on_config(self, cfg: controller_pb2.NodeManagerFtConfig, source: str) -> None:
        if self.state.set_proxy(cfg.enable_dp_scale_down_proxy, f"controller {source}") and not cfg.enable_dp_scale_down_proxy:
            dropped = self.guard.clear()
            if dropped:
                log.warning("instance=%d request_id=%s guard dropped: the proxy was switched off", self._instance,
                            dropped)

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
                num_redundant_experts=cap.num_redundant_experts, retry_supported=cap.retry_supported,
                supports_scale_up=cap.supports_scale_up,
            ),
            retired_ids=sorted(self.state.retired),
        )

    def pod_pb(self) -> common_pb2.Pod:
        return common_pb2.Pod(pod_ip=self.config.pod_ip, node_name=self.config.node_name,
                              node_manager_address=self.grpc_address, endpoint_ids=self.supervisor.ids,
                              dp_store_port_base=self.config.dp_store_port_base)
