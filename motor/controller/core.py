"""The Controller's state and plain functions behind its gRPC service: registration, heartbeats,
fault intake, the periodic publication SET, start-up restore, and leadership among replicas.

Leadership (`motor.controller.election`, `motor.controller.fencing`): without election the core
acts from the start, as a lone Controller always did. With election it acts only while its
replica leads: on winning a term it forgets everything it knew, restores the instances from the
store (the restart rule of RFC §5: an interrupted round becomes RECONFIGURING, apply is never
replayed), reads what the Coordinator routes to, and only then starts the FaultManager, the
hardware monitor and the publication loop;
on losing the term it stops all of them at once (a round in flight is cancelled; its clean-up calls
are refused by the fence) and serves a read-only view of what the store holds (`status_runtimes`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gen.motor.v1 import controller_pb2
from motor.controller.clients import ControllerPeers
from motor.controller.clock import Clock, SystemClock
from motor.controller.config import ControllerConfig
from motor.controller.election import LeaderElection
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.fault_manager import FaultManager
from motor.controller.fault_tolerance.gate import evaluate_gate
from motor.controller.fault_tolerance.strategy.base import ControllerDeps, publish_serving_view, random_id
from motor.controller.fault_tolerance.strategy_center import FastRecovery
from motor.controller.fault_tolerance.timeline import TimelineBook
from motor.controller.fencing import Fence, Leadership
from motor.controller.hardware.monitor import ResourceMonitor
from motor.controller.instances import InstanceRegistry, expected_alive
from motor.controller.metrics import ControllerMetrics
from motor.controller.model.runtime import (
    FALLBACK_RECONFIGURATION,
    TRANSACTION_PHASES,
    FtPhase,
    FtRuntimeStore,
)
from motor.controller.persistence import RuntimeStore, StoreError
from motor.controller.persistence.persister import RuntimePersister, read_only_view
from motor.controller.publishers.fanout import Publication
from motor.controller.restoration.replacement import note_replacement, replacement_rule
from motor.controller.restoration.restorer import Restorer
from motor.controller.serving import PublishError, project_serving_view
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
        leadership: Leadership | None = None,
        metrics: ControllerMetrics | None = None,
        new_id: Callable[[], str] = random_id,
    ) -> None:
        """`metrics`: shared with what the process built before the core (its leadership's refusals);
        `new_id`: the unique part of the request ids the core's strategies and probes make."""
        self.config = config
        # The config is frozen: every heartbeat's answer carries this one message.
        self._nm_config = controller_pb2.NodeManagerFtConfig(
            enable_dp_scale_down_proxy=config.fault_tolerance_config.enable_dp_scale_down_proxy,
            heartbeat_interval_sec=config.heartbeat_interval_sec, heartbeat_quiet_interval_sec=config.quiet_interval_sec)
        self.clock = clock or SystemClock()
        self.leadership = leadership or Leadership.solo()
        ft = config.fault_tolerance_config
        self.scale_down_enabled = ft.enable_fault_tolerance and ft.enable_dp_scale_down
        self.runtimes = FtRuntimeStore(self.scale_down_enabled)
        self.registry = InstanceRegistry(config.max_instances)
        self.metrics = metrics or ControllerMetrics()
        self.timelines = TimelineBook(observer=self.metrics)
        self.broadcaster = RuntimeBroadcaster(
            on_change=lambda iid: self.metrics.observe_runtime(self.runtimes.find(iid)), wall=self.clock.wall)
        self.store = store
        self.persister = RuntimePersister(store, self.runtimes, self.registry)
        self.nodemanagers = peers.nodemanagers
        self.pusher = Publication.from_peers(peers, self.clock.wall, self.metrics.refresh, self.metrics.publisher_call,
                                             self.metrics.publisher_repair)
        self.deps = ControllerDeps(
            config=config, runtimes=self.runtimes, registry=self.registry, nodemanagers=self.nodemanagers,
            pusher=self.pusher, timelines=self.timelines, clock=self.clock, persist=self.persister.persist,
            changed=self.broadcaster.changed, new_id=new_id)
        self._fast_recovery = fast_recovery
        self.faults = FaultManager(self.deps, fast_recovery, self.metrics.hardware_fault)
        self.restorer = Restorer(self.deps, lambda: self.faults)
        self.monitor = ResourceMonitor.from_config(config.hardware_monitor)
        # The election start() campaigns through, when replicas elect a leader.
        self._election: LeaderElection | None = None
        # Acting: leading and done taking over (always, without election).
        self._acting = not self.leadership.election_enabled
        self._acting_tasks: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._promotion: asyncio.Task[None] | None = None
        self._role_lock = asyncio.Lock()
        self._standby_view: list = []
        self.takeovers = 0
        self.metrics.leadership(self.leadership.leading, self.leadership.term)

    @property
    def acting(self) -> bool:
        """This replica leads now and has taken over: the only state in which it writes or acts."""
        return self._acting and self.leadership.leading

    def status_runtimes(self):
        """The runtimes to report: this replica's own while it acts, else what the store holds."""
        if self.acting or not self.leadership.election_enabled:
            return self.runtimes.all()
        return list(self._standby_view)

    async def start(self, election: LeaderElection | None = None) -> None:
        """Acts at once without `election`; with it (built on this core's elected and deposed),
        campaigns and acts only once a term is won."""
        log.info("controller store: %s", self.store.description)
        if election is None:
            await self._start_acting()
            return
        self._election = election
        self._tasks.append(asyncio.create_task(self._standby_refresh_loop(), name="standby-view"))
        await election.start()
        if self._promotion is not None:
            # Won the first round: serve only once the takeover is done (it resigns by itself on failure).
            await asyncio.gather(asyncio.shield(self._promotion), return_exceptions=True)

    async def stop(self) -> None:
        if self._election is not None:
            # Resigning first lets a standby take over while this one finishes stopping.
            await self._election.close(resign=True)
        if self._promotion is not None:
            self._promotion.cancel()
            await asyncio.gather(self._promotion, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stop_acting()
        await self.nodemanagers.close()
        await self.pusher.close()
        await self.store.close()

    # ---- leadership ----------------------------------------------------------------------------

    async def _start_acting(self) -> None:
        await self.persister.restore(self.clock)
        for runtime in self.runtimes.all():  # restored instances are exported before their first change
            self.metrics.observe_runtime(runtime)
        # Before the fault manager acts: a restored reconfiguration's drain withdraws what is routed to.
        await self._learn_published()
        self.faults.start()
        await self.monitor.start(self.faults.report_hardware)
        self._acting_tasks.append(asyncio.create_task(self._publish_loop(), name="publish-set"))
        self.pusher.start()
        # A failed write is written again until the store has it (a round's post-commit write above all).
        self._acting_tasks.append(asyncio.create_task(self.persister.retry_unsaved(self.clock.sleep),
                                                      name="persist-retry"))
        self._acting_tasks.append(asyncio.create_task(self.restorer.run(), name="capacity-restore"))
        self.faults.notify()

    async def _stop_acting(self) -> None:
        tasks, self._acting_tasks = self._acting_tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.pusher.stop()
        await self.monitor.stop()
        await self.faults.close()

    def _forget(self) -> None:
        """Everything a term knew; the next one starts from the store."""
        self.runtimes.clear()
        self.registry.clear()
        self.persister.reset()
        self.pusher.forget()
        self.restorer.forget()
        self.faults = FaultManager(self.deps, self._fast_recovery, self.metrics.hardware_fault)
        self.monitor = ResourceMonitor.from_config(self.config.hardware_monitor)

    def elected(self, fence: Fence) -> None:
        """The election won a term: take over in the background (the keepalive goes on meanwhile)."""
        self._promotion = asyncio.create_task(self._take_over(fence), name=f"take-over-term-{fence.term}")

    async def _take_over(self, fence: Fence) -> None:
        async with self._role_lock:
            if not fence.leading:
                return
            started = self.clock.monotonic()
            self._forget()
            try:
                await self._start_acting()
                fence.check("taking over")
            except Exception as exc:  # noqa: BLE001 - a failed takeover resigns, the election goes on
                log.error("replica %s: taking over term %d failed, giving the term up: %s",
                          self.leadership.replica_id, fence.term, exc)
                fence.lose(f"takeover failed: {exc}")
                return
            self._acting = True
            self.takeovers += 1
            took = self.clock.monotonic() - started
            self.metrics.leadership(True, fence.term, took)
            log.warning("replica %s acting as leader of term %d: %d instances restored in %.3fs (%s)",
                        self.leadership.replica_id, fence.term, len(self.runtimes.all()), took,
                        ", ".join(f"instance={r.instance_id} phase={r.phase} dead_committed={sorted(r.dead_committed)}"
                                  for r in self.runtimes.all()) or "none")
            for runtime in self.runtimes.all():
                self.broadcaster.changed(runtime.instance_id)

    async def _learn_published(self) -> None:
        """What the publishers route to (a previous leader's or this process's earlier publications):
        a round's drain then withdraws exactly that; SERVING flags stay as restored (unpublished) until
        this leader's SET. Bounded by the request deadline: unread, the first drain reads it itself."""
        deadline_sec = self.config.fault_tolerance_config.dp_scale_down_config.request_timeout_sec
        try:
            published = await self.pusher.learn(deadline_sec)
        except (PublishError, TimeoutError) as exc:
            log.warning("could not read what the publishers route to within %gs (the first drain reads it "
                        "again): %s", deadline_sec, exc or "timed out")
            return
        log.info("the publishers route to %s", {iid: list(ids) for iid, ids in published.items()} or "nothing")

    async def deposed(self, reason: str) -> None:
        """The term is lost: stop acting at once (the fence already refuses every action)."""
        promotion, self._promotion = self._promotion, None
        if promotion is not None and not promotion.done():
            promotion.cancel()
            await asyncio.gather(promotion, return_exceptions=True)
        async with self._role_lock:
            was_acting, self._acting = self._acting, False
            await self._stop_acting()
            self._forget()
        self.metrics.leadership(False, 0)
        log.warning("replica %s stopped acting (%s): %s; standing by", self.leadership.replica_id,
                    "was leading" if was_acting else "had not taken over yet", reason)

    async def _standby_refresh_loop(self) -> None:
        interval = self.config.leader_election.standby_refresh_interval_sec
        failing = False
        while True:
            if not self.acting:
                try:
                    self._standby_view = await read_only_view(self.store, self.scale_down_enabled)
                    if failing:
                        log.info("standby view: the store answers again")
                    failing = False
                except StoreError as exc:
                    if not failing:
                        log.warning("standby view: reading the store failed (logged once per outage): %s", exc)
                    failing = True
            await asyncio.sleep(interval)

    # ---- registration and heartbeats ---------------------------------------------------------

    async def register(self, req: controller_pb2.RegisterRequest, identity: str = "") -> controller_pb2.RegisterResponse:
        iid = req.instance_id
        known = self.registry.get(iid)
        was_bound = known is not None and req.pod.pod_ip in known.bindings()
        pods_before = set(known.pods) if known is not None else set()
        record, newly = self.registry.register(req, self.clock.monotonic(), identity, **replacement_rule(self.deps, iid))
        await note_replacement(self.deps, iid, req, pods_before)
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
            await self.persister.persist_or_note(iid)
            if runtime.phase is not FtPhase.RECONFIGURING:
                await publish_serving_view(self.deps, iid)
        elif runtime is not None:
            self._check_retired(iid)
            if not was_bound and req.pod.pod_ip in record.bindings():
                # A pod restored unbound is bound now: persisted, so the next leader keeps it bound.
                await self.persister.persist_or_note(iid)
        if runtime is not None:
            self.faults.pod_registered(iid)
        self.broadcaster.changed(iid)
        return controller_pb2.RegisterResponse(accepted=True, message="assembled" if record.assembled else "waiting for pods",
                                               config=self._nm_config)

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
            return controller_pb2.HeartbeatResponse(known=False, config=self._nm_config)
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
        return controller_pb2.HeartbeatResponse(known=True, config=self._nm_config)

    def report_software_fault(self, req: controller_pb2.ReportSoftwareFaultRequest, kind: EvidenceKind) -> str:
        self.metrics.fault_report(str(kind))
        # A report without an observation time is dated by its arrival on the Controller's wall clock:
        # the latest it can have been observed, so it is never taken as older than what it follows.
        observed = req.observed_at_unix_sec or self.clock.wall()
        detail = req.evidence or (req.status.fault_info if req.HasField("status") else "")
        return self.faults.report_software(req.instance_id, req.endpoint_id, kind, detail, observed,
                                           req.diagnosing_observed_at_unix_sec)

    # ---- publication -------------------------------------------------------------------------

    def _servable(self, runtime) -> bool:
        """In the SET: servable phases only, and not while a strategy has drained the instance. A
        strategy that already published its result (the success ADD, before its task has ended)
        keeps the view, so a SET computed right after that ADD never withdraws it."""
        if not runtime.servable:
            return False
        return self.faults.running(runtime.instance_id) is None or runtime.serving_published

    def _servable_views(self):
        views = []
        for runtime in self.runtimes.all():
            record = self.registry.get(runtime.instance_id)
            if record is not None and record.assembled and self._servable(runtime):
                views.append(project_serving_view(record.topology(), runtime))
        return views

    async def publish_all(self) -> list[int] | None:
        """One SET of every servable view through the same projection; converges lost publications.
        serving_published (and so can_serve) follows what every required publisher acknowledged. Returns
        the instance ids the SET carried (None: no publisher, or the SET failed)."""
        if not self.pusher.enabled:
            return None
        try:
            ids = set(await self.pusher.set_all(self._servable_views))
        except PublishError as exc:
            log.warning("periodic SET failed: %s", exc)
            return None
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
        return sorted(ids)

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.publish_interval_sec)
            await self.publish_all()
