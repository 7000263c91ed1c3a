"""The Controller's state and plain functions behind its gRPC service: registration, heartbeats,
fault intake, the periodic publication SET, and start-up restore."""

from __future__ import annotations

import asyncio
import logging

from gen.motor.v1 import controller_pb2
from motor.common.config import ControllerConfig
from motor.controller.clients import ControllerPeers
from motor.controller.clock import Clock, SystemClock
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.fault_manager import FaultManager
from motor.controller.fault_tolerance.gate import evaluate_gate
from motor.controller.fault_tolerance.runtime import (
    SERVABLE_PHASES,
    TRANSACTION_PHASES,
    FtPhase,
    FtRuntimeStore,
)
from motor.controller.fault_tolerance.strategy.base import (
    FALLBACK_RECONFIGURATION,
    ControllerDeps,
    publish_serving_view,
)
from motor.controller.fault_tolerance.strategy_center import FastRecovery
from motor.controller.fault_tolerance.timeline import TimelineBook
from motor.controller.hardware.monitor import ResourceMonitor
from motor.controller.instances import InstanceRegistry, expected_alive
from motor.controller.metrics import ControllerMetrics
from motor.controller.persistence import RuntimeStore, StoreError
from motor.controller.persistence.persister import RuntimePersister
from motor.controller.serving import EventPusher, PublishError, project_serving_view
from motor.controller.status import RuntimeBroadcaster

log = logging.getLogger(__name__)


class ControllerCore:
    def __init__(
        self,
        config: ControllerConfig,
        store: RuntimeStore,
        peers: ControllerPeers,
        clock: Clock | None = None,
        fast_recovery: FastRecovery | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        ft = config.fault_tolerance_config
        self.scale_down_enabled = ft.enable_fault_tolerance and ft.enable_dp_scale_down
        self.runtimes = FtRuntimeStore(self.scale_down_enabled)
        self.registry = InstanceRegistry()
        self.metrics = ControllerMetrics()
        self.timelines = TimelineBook(observer=self.metrics)
        self.broadcaster = RuntimeBroadcaster()
        self.broadcaster.add_listener(lambda iid: self.metrics.observe_runtime(self.runtimes.find(iid)))
        self.store = store
        self.persister = RuntimePersister(store, self.runtimes, self.registry)
        self.nodemanagers = peers.nodemanagers
        self.pusher = EventPusher(peers.coordinator, self.clock.wall, self.metrics.refresh)
        self.deps = ControllerDeps(
            config=config,
            runtimes=self.runtimes,
            registry=self.registry,
            nodemanagers=self.nodemanagers,
            pusher=self.pusher,
            timelines=self.timelines,
            clock=self.clock,
            persist=self.persister.persist,
            changed=self.broadcaster.changed,
        )
        self.faults = FaultManager(self.deps, fast_recovery)
        self.faults.hardware.on_fault = self.metrics.hardware_fault
        self.monitor = ResourceMonitor.from_config(config.hardware_monitor)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        log.info("controller store: %s", self.store.description)
        await self.persister.restore(self.clock)
        for runtime in self.runtimes.all():  # restored instances are exported before their first change
            self.metrics.observe_runtime(runtime)
        self.faults.start()
        await self.monitor.start(self.faults.report_hardware)
        self._tasks.append(asyncio.create_task(self._publish_loop(), name="publish-set"))
        self.faults.notify()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.monitor.stop()
        await self.faults.close()
        await self.nodemanagers.close()
        await self.pusher.close()
        await self.store.close()

    def nm_config(self) -> controller_pb2.NodeManagerFtConfig:
        return controller_pb2.NodeManagerFtConfig(
            enable_dp_scale_down_proxy=self.config.fault_tolerance_config.enable_dp_scale_down_proxy,
            heartbeat_interval_sec=self.config.heartbeat_interval_sec,
        )

    # ---- registration and heartbeats ---------------------------------------------------------

    async def register(self, req: controller_pb2.RegisterRequest) -> controller_pb2.RegisterResponse:
        record, newly = self.registry.register(req, self.clock.monotonic())
        iid = req.instance_id
        log.info("instance=%d pod=%s registered ranks=%s nodemanager=%s retired=%s assembled=%s",
                 iid, req.pod.pod_ip, sorted(e.id for e in req.endpoints), req.pod.node_manager_address,
                 list(req.retired_ids), record.assembled)
        runtime = self.runtimes.find(iid)
        if record.assembled and runtime is None:
            cap, note = record.capability()
            runtime = self.runtimes.create(iid, record.original_dp_ranks, FALLBACK_RECONFIGURATION)
            # The static gate is known at assembly: status shows it before any fault.
            self.runtimes.set_gate(iid, evaluate_gate(
                enable_fault_tolerance=self.config.fault_tolerance_config.enable_fault_tolerance,
                enable_dp_scale_down=self.config.fault_tolerance_config.enable_dp_scale_down,
                capability=cap,
            ))
            if cap is None:
                log.warning("instance=%d FT capability unusable, scale-down fails closed: %s", iid, note)
            # Decided before anything is published: a pod may have retired ranks before assembly.
            self._check_retired(iid)
            try:
                await self.persister.persist(iid)
            except StoreError as exc:
                self.runtimes.set_error(iid, f"persisting runtime failed: {exc}")
            if runtime.phase is not FtPhase.RECONFIGURING:
                await publish_serving_view(self.deps, iid)
        elif runtime is not None:
            self._check_retired(iid)
        if runtime is not None:
            self.faults.pod_registered(iid)
        self.broadcaster.changed(iid)
        return controller_pb2.RegisterResponse(accepted=True, message="assembled" if record.assembled else "waiting for pods",
                                               config=self.nm_config())

    def _check_retired(self, instance_id: int) -> None:
        """A pod that retired ranks the Controller never committed crossed the NM-commit /
        Controller-commit window (RFC §5): handled as an interrupted round, never by replaying apply.
        Every pod's retired ids are kept with its record, so the check holds whichever pod
        registered first (it runs at assembly and on every later registration)."""
        runtime = self.runtimes.get(instance_id)
        record = self.registry.get(instance_id)
        if record is None or runtime.phase in TRANSACTION_PHASES or runtime.phase in (FtPhase.RECONFIGURING,
                                                                                       FtPhase.DISABLED):
            return
        unknown = {ip: sorted(pod.retired - runtime.dead_committed) for ip, pod in sorted(record.pods.items())}
        unknown = {ip: ranks for ip, ranks in unknown.items() if ranks}
        if not unknown:
            return
        self.runtimes.set_phase(instance_id, FtPhase.RECONFIGURING)
        where = "; ".join(f"pod {ip} retired ranks {ranks}" for ip, ranks in unknown.items())
        self.runtimes.set_error(instance_id, f"{where} the controller never committed: falling back")
        log.warning("instance=%d %s uncommitted: interrupted round -> RECONFIGURING", instance_id, where)
        self.faults.notify()

    def heartbeat(self, req: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        pod = self.registry.heartbeat(req.pod_ip, req.instance_id, req.alive_endpoint_ids, self.clock.monotonic())
        if pod is None:
            return controller_pb2.HeartbeatResponse(known=False, config=self.nm_config())
        runtime = self.runtimes.find(req.instance_id)
        if runtime is not None:
            expected = expected_alive(pod, runtime.dead_committed, self.scale_down_enabled)
            alive = set(req.alive_endpoint_ids)
            # While reconfiguring, NodeManagers restart every rank before dead_committed is cleared.
            if runtime.phase is FtPhase.RECONFIGURING:
                alive &= expected
            missing, extra = self.faults.observe_heartbeat(req.instance_id, pod.ranks, expected, alive)
            mismatch = f"pod {req.pod_ip} heartbeat reports ranks "
            if extra:
                error = (f"{mismatch}{sorted(extra)} alive; it must report exactly {sorted(expected)} "
                         f"(dead_committed {sorted(runtime.dead_committed)})")
                log.warning("instance=%d %s", req.instance_id, error)
                if runtime.last_error != error:
                    self.runtimes.set_error(req.instance_id, error)
                    self.broadcaster.changed(req.instance_id)
            elif runtime.last_error and runtime.last_error.startswith(mismatch):
                # The pod reports the exact set again (e.g. a heartbeat sent just before its commit).
                self.runtimes.set_error(req.instance_id, None)
                self.broadcaster.changed(req.instance_id)
            if missing:
                log.info("instance=%d pod=%s heartbeat misses ranks %s", req.instance_id, req.pod_ip, sorted(missing))
        return controller_pb2.HeartbeatResponse(known=True, config=self.nm_config())

    def report_software_fault(self, req: controller_pb2.ReportSoftwareFaultRequest, kind: EvidenceKind) -> str:
        self.metrics.fault_report(str(kind))
        observed = req.observed_at_unix_sec or self.clock.wall()
        detail = req.evidence or (req.status.fault_info if req.HasField("status") else "")
        return self.faults.report_software(req.instance_id, req.endpoint_id, kind, detail, observed,
                                           req.diagnosing_observed_at_unix_sec)

    # ---- publication -------------------------------------------------------------------------

    def _servable(self, runtime) -> bool:
        """In the SET: servable phases only, and not while a strategy has drained the instance. A
        strategy that already published its result (the success ADD, before its task has ended)
        keeps the view, so a SET computed right after that ADD never withdraws it."""
        if not (runtime.phase in SERVABLE_PHASES or runtime.phase is FtPhase.DISABLED):
            return False
        return self.faults.running(runtime.instance_id) is None or runtime.serving_published

    def _servable_views(self):
        views = []
        for runtime in self.runtimes.all():
            record = self.registry.get(runtime.instance_id)
            if record is not None and record.assembled and self._servable(runtime):
                views.append(project_serving_view(record.topology(), runtime))
        return views

    async def publish_all(self) -> None:
        """One SET of every servable view through the same projection; converges lost publications.
        serving_published (and so can_serve) follows what the Coordinator acknowledged."""
        if not self.pusher.enabled:
            return
        try:
            ids = set(await self.pusher.set_all(self._servable_views))
        except PublishError as exc:
            log.warning("periodic SET failed: %s", exc)
            return
        for runtime in self.runtimes.all():
            iid = runtime.instance_id
            if iid in ids and not runtime.serving_published:
                self.runtimes.set_published(iid, True)
                if runtime.last_error and runtime.last_error.startswith("publish failed"):
                    runtime.last_error = None
                self.broadcaster.changed(iid)
            elif iid not in ids and runtime.serving_published:
                self.runtimes.set_published(iid, False)
                self.broadcaster.changed(iid)

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.publish_interval_sec)
            await self.publish_all()
