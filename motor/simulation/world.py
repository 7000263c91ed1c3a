"""The simulated world of one schedule: one instance's pods, engines and network around the REAL
Controller core, NodeManager parts and Coordinator routing table.

Real: `ControllerCore` (its FaultManager, strategy centre, strategies, snapshot pulls, runtime
store, persister over the memory store, serving projection), per pod the NodeManager parts
(`motor.simulation.pod`), the Coordinator's `RoutingTable`. Simulated: the engines
(`motor.simulation.engines`), processes, the network (`motor.simulation.transports`) and the
restarts. A Controller restart is a new `ControllerCore` over the same store (the store outlives
it, as etcd does); the old core's calls fail from the moment it crashes.
"""

from __future__ import annotations

import asyncio
import logging
import random

import grpc

from motor.common.config.loader import load_config
from motor.controller.clients import ControllerPeers, PeerCallError
from motor.controller.config import ControllerConfig
from motor.controller.core import ControllerCore
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import MemoryRuntimeStore, StoreError
from motor.controller.persistence.records import decode_record
from motor.coordinator.routing import RoutingTable
from nodemanager.config import NodeManagerConfig

from motor.simulation.engines import Knobs, SimGroup
from motor.simulation.hardware import HardwareModel
from motor.simulation.pod import SimNodeManager
from motor.simulation.transports import (
    Network,
    NetworkBounds,
    SimControllerClient,
    SimCoordinatorClient,
    SimNodeManagerClients,
)
from motor.simulation.virtual_time import VirtualClock

log = logging.getLogger("motor.simulation.world")

INSTANCE_ID = 7
PODS = ((0, 1), (2, 3))


class DurableMemoryStore(MemoryRuntimeStore):
    """The memory store as a Controller restart sees etcd: it outlives the process that closes it,
    and its writes fail while `failing` (an etcd outage)."""

    failing = False

    async def put(self, record, expected_generation) -> None:
        if self.failing:
            raise StoreError(f"simulated store outage (put instance {record.instance_id})")
        await super().put(record, expected_generation)

    async def close(self) -> None:
        pass

    def held(self, instance_id: int):
        """The record the store holds now (what a restarted Controller restores)."""
        entry = self._records.get(instance_id)
        return None if entry is None else decode_record(entry[1], key=f"memory:instances/{instance_id}")


def controller_config(idle_fault_probe: bool = False) -> ControllerConfig:
    return load_config(ControllerConfig, None, [
        ("fault_tolerance_config.enable_dp_scale_down", True),
        ("fault_tolerance_config.idle_fault_probe", idle_fault_probe),
        ("coordinator_address", "127.0.0.1:1"),
    ])


def nodemanager_config(pod_index: int, ranks: tuple[int, ...], dp_size: int) -> NodeManagerConfig:
    return NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": INSTANCE_ID, "dp_size": dp_size,
        "pod_ip": f"10.0.0.{pod_index + 1}", "node_name": f"node-{pod_index + 1}",
        "dp_master_ip": "10.0.0.1", "dp_master_port": 29500,
        "engines": [{"dp_rank": r, "port": 8000 + r,
                     "device_infos": [{"device_id": f"Ascend910-{i}"}]} for i, r in enumerate(ranks)],
        "fault_tolerance_config": {"enable_dp_scale_down": True},
        "ft_capability": {"num_redundant_experts": 8},
    })


class World:
    def __init__(self, rng: random.Random, dialect: str, loop, bounds: NetworkBounds, trace: list[str]) -> None:
        self.rng, self.dialect, self.trace = rng, dialect, trace
        self.loop = loop
        self.clock = VirtualClock(loop)
        self.config = controller_config(idle_fault_probe=rng.random() < 0.5)
        self.net = Network(rng, bounds)
        self.knobs = Knobs(idle=rng.random() < 0.5)
        if dialect == "rfc":
            self.knobs.diagnosing_sec = 0.0
        ranks = [r for pod in PODS for r in pod]
        self.group = SimGroup(ranks, dialect, self.knobs)
        self.store = DurableMemoryStore()
        self.table = RoutingTable()
        self.nm_configs = {f"10.0.0.{i + 1}:50051": nodemanager_config(i, pod, len(ranks))
                           for i, pod in enumerate(PODS)}
        self.pods: dict[str, SimNodeManager | None] = {}
        self.core: ControllerCore | None = None
        self._peers: ControllerPeers | None = None
        self.incarnation = 0
        # Observations the invariants read.
        self.applies: dict[str, set[int]] = {}  # request_id → Controller incarnations that sent it
        self.relaunches = 0
        self.inflight: dict[str, int] = {}  # strategy request_id → calls in flight
        self.max_concurrent_strategies = 0
        self.pod_addresses = list(self.nm_configs)
        # MindCluster: hardware faults, their truth and their reports.
        self.hardware = HardwareModel(self)
        # Called with (call name, NodeManager address, args) for every Controller→NodeManager call.
        self.call_listeners: list = []

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.clock.monotonic():8.3f} {text}")

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        for address in self.nm_configs:
            self._start_pod(address)
        await self._start_controller()

    def _start_pod(self, address: str) -> None:
        nm = SimNodeManager(self.nm_configs[address], self.group,
                            SimControllerClient(self.net, lambda: self.core, 5.0),
                            monotonic=self.clock.monotonic, wall=self.clock.wall, address=address)
        self.pods[address] = nm
        nm.start()

    async def _start_controller(self) -> None:
        self.incarnation += 1
        incarnation = self.incarnation
        timeout = self.config.fault_tolerance_config.dp_scale_down_config.request_timeout_sec
        nms = _ObservedNodeManagers(self, incarnation, SimNodeManagerClients(self.net, self.pods, timeout))
        coordinator = SimCoordinatorClient(self.net, lambda: self.table, timeout, self.group.request)
        peers = ControllerPeers(nms, coordinator)  # type: ignore[arg-type]
        core = ControllerCore(self.config, self.store, peers, self.clock)
        self._peers = peers
        self.core = core
        await core.start()

    async def stop(self) -> None:
        if self.core is not None:
            await self._crash_controller()
        for address, nm in list(self.pods.items()):
            if nm is not None:
                await nm.crash()
        self.group.close()

    async def _crash_controller(self) -> None:
        core, self.core = self.core, None
        if core is None:
            return
        nms = self._peers.nodemanagers  # type: ignore[union-attr]
        nms.dead = True  # a dead process sends nothing more
        await core.stop()

    # -- faults --------------------------------------------------------------------------------
    def pod_of(self, rank: int) -> str:
        for address, cfg in self.nm_configs.items():
            if rank in [e.dp_rank for e in cfg.engines]:
                return address
        raise KeyError(rank)

    def kill_process(self, rank: int) -> None:
        nm = self.pods.get(self.pod_of(rank))
        if nm is not None:
            nm.supervisor.die(rank)

    def executor_death(self, rank: int) -> None:
        self.group.executor_death(rank)

    def unhealthy(self, rank: int) -> None:
        self.group.unhealthy(rank)

    async def nm_crash(self, address: str) -> None:
        nm = self.pods.get(address)
        if nm is not None:
            self.pods[address] = None
            await nm.crash()

    def nm_restart(self, address: str) -> None:
        if self.pods.get(address) is None:
            self._start_pod(address)

    async def controller_restart(self, down_sec: float) -> None:
        """Crash, stay down `down_sec`, start a new one; a crash while down changes nothing (one
        Controller process at most: the world has no election)."""
        if self.core is None:
            return
        await self._crash_controller()
        await asyncio.sleep(down_sec)
        await self._start_controller()

    def coordinator_restart(self) -> None:
        self.table = RoutingTable()

    # -- observations --------------------------------------------------------------------------
    def runtime(self):
        return None if self.core is None else self.core.runtimes.find(INSTANCE_ID)

    def published(self) -> frozenset[int] | None:
        """The ranks the Coordinator routes to for the instance (None: not published)."""
        for view in self.table.snapshot(0.0).instances:
            if view.spec.id == INSTANCE_ID:
                return frozenset(view.spec.endpoint_ids)
        return None

    def dead_in_truth(self) -> set[int]:
        return {r for r, e in self.group.engines.items() if not e.process_up or e.status == "dead"}

    def healthy_in_truth(self) -> set[int]:
        return {r for r, e in self.group.engines.items()
                if e.process_up and e.ready and e.status == "healthy" and r in self.group.members}

    def strategy_running(self) -> bool:
        return self.core is not None and self.core.faults.running(INSTANCE_ID) is not None

    def phase(self) -> FtPhase | None:
        rt = self.runtime()
        return None if rt is None else rt.phase

    def observe_call(self, name: str, address: str, args: tuple) -> None:
        for listener in self.call_listeners:
            listener(name, address, args)


class _ObservedNodeManagers:
    """The Controller's NodeManager clients, seen by the invariants: who sent which apply, which
    strategies have calls in flight, which calls a crashed Controller would still make."""

    def __init__(self, world: World, incarnation: int, clients: SimNodeManagerClients) -> None:
        self._world, self._incarnation, self._clients = world, incarnation, clients
        self.dead = False

    def get(self, address: str):
        return _ObservedClient(self, self._clients.get(address))

    async def close(self) -> None:
        pass


class _ObservedClient:
    def __init__(self, owner: _ObservedNodeManagers, client) -> None:
        self._owner, self._client = owner, client

    def __getattr__(self, name: str):
        target = getattr(self._client, name)
        if name not in ("guard", "status", "apply", "finalize", "stop_engines", "start_engines", "stop_pod"):
            return target

        async def call(*args, **kwargs):
            owner, world = self._owner, self._owner._world
            request_id = args[1] if name not in ("stop_pod",) else args[0]
            if owner.dead:
                raise PeerCallError(name, self._client.address, grpc.StatusCode.CANCELLED, "controller process gone")
            world.observe_call(name, self._client.address, args)
            if name == "apply":
                world.applies.setdefault(request_id, set()).add(owner._incarnation)
            if name == "start_engines":
                world.relaunches += 1
                world.note(f"start_engines {self._client.address} {request_id}")
            strategy = request_id.split("-")[0] in ("sd", "reconf")
            if strategy:
                world.inflight[request_id] = world.inflight.get(request_id, 0) + 1
                live = sorted(rid for rid, n in world.inflight.items() if n > 0)
                if len(live) > 1 and len(live) > world.max_concurrent_strategies:
                    world.note(f"strategies in flight at once: {live} ({name} {self._client.address})")
                world.max_concurrent_strategies = max(world.max_concurrent_strategies, len(live))
            try:
                return await target(*args, **kwargs)
            finally:
                if strategy:
                    world.inflight[request_id] -= 1
        return call
