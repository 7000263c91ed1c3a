"""The simulated world of one schedule: one instance's pods, engines and network around the REAL
Controller core, NodeManager parts and Coordinator routing table.

Real: the Controller replicas (`motor.simulation.replicas`: each one's `ControllerCore` with its
FaultManager, strategy centre, strategies, snapshot pulls, persister and serving projection, the
etcd runtime store fenced by its term and its leader election, over the in-memory etcd), per pod
the `NodeManagerAgent` with its term fence over simulated processes and engine API
(`motor.simulation.pod`), the Coordinator's `RoutingTable` and term fence. Simulated: etcd
(`motor.simulation.etcd`), the engines (`motor.simulation.engines`), processes, the network
(`motor.simulation.transports`) and the restarts. The store outlives every Controller process, as
etcd does; a crashed process's calls fail from the moment it crashes. A crashed NodeManager sends
nothing more and its engines die with it; one that exits on its own (StopPod, every engine dead)
stops as on SIGTERM and its container is restarted, over the same StopPod record.
"""

from __future__ import annotations

import asyncio
import logging
import random

from motor.common.config.loader import load_config
from motor.common.term_fence import TermFence
from motor.common.text_file import MemoryTextFile
from motor.controller.config import ControllerConfig
from motor.controller.core import ControllerCore
from motor.controller.model.runtime import FtPhase
from motor.controller.restoration.restorer import RestoreRefused
from motor.coordinator.routing import RoutingTable
from nodemanager.agent import NodeManagerAgent
from nodemanager.config import NodeManagerConfig

from motor.simulation.engines import Knobs, SimGroup
from motor.simulation.etcd import SimEtcd
from motor.simulation.hardware import HardwareModel
from motor.simulation.pod import SimEngineHttp, SimSupervisor
from motor.simulation.replicas import ETCD_ENDPOINT, KEY_PREFIX, ControllerReplicas
from motor.simulation.network import Network, NetworkBounds
from motor.simulation.sglang_group import SglangGroup
from motor.simulation.transports import SimControllerClient
from motor.simulation.virtual_time import VirtualClock

log = logging.getLogger("motor.simulation.world")

INSTANCE_ID = 7
PODS = ((0, 1), (2, 3))
# A NodeManager that exits on its own lets its answer leave first (nodemanager/main.py), and the
# orchestrator restarts its container this long after it ended.
POD_EXIT_DELAY_SEC = 0.2
CONTAINER_RESTART_SEC = 1.0
REPLICAS = 2


def controller_config(idle_fault_probe: bool = False, fast_recovery: bool = False) -> ControllerConfig:
    return load_config(ControllerConfig, None, [
        ("fault_tolerance_config.enable_dp_scale_down", True),
        ("fault_tolerance_config.idle_fault_probe", idle_fault_probe),
        ("fault_tolerance_config.enable_fast_recovery", fast_recovery),
        ("coordinator_address", "127.0.0.1:1"),
        ("store.etcd_endpoints", [ETCD_ENDPOINT]),
        ("store.key_prefix", KEY_PREFIX),
        ("leader_election.mode", "on"),
        # The schedule's `restore` events ask for capacity restorations (RestoreInstance's path).
        ("capacity_restore.mode", "manual"),
        # A standby's read-only view is read by nothing here; its reload costs a load_all a second.
        ("leader_election.standby_refresh_interval_sec", 5.0),
    ])


def nodemanager_config(pod_index: int, ranks: tuple[int, ...], dp_size: int, scale_up: bool = False) -> NodeManagerConfig:
    return NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": INSTANCE_ID, "dp_size": dp_size,
        "pod_ip": f"10.0.0.{pod_index + 1}", "node_name": f"node-{pod_index + 1}",
        "dp_master_ip": "10.0.0.1", "dp_master_port": 29500,
        "engines": [{"dp_rank": r, "port": 8000 + r,
                     "device_infos": [{"device_id": f"Ascend910-{i}"}]} for i, r in enumerate(ranks)],
        "fault_tolerance_config": {"enable_dp_scale_down": True},
        "ft_capability": {"num_redundant_experts": 8, "supports_scale_up": scale_up},
    })


class World:
    def __init__(self, rng: random.Random, dialect: str, loop, bounds: NetworkBounds, trace: list[str],
                 ids: random.Random | None = None, jitter: random.Random | None = None,
                 replicas: int = REPLICAS, fast_recovery: bool = False, scale_up: bool = False) -> None:
        """`ids`: the source of the Controller's request ids; `jitter`: of the NodeManagers' retry
        jitter (seeded, so that both repeat); `fast_recovery`: the Controller retries transient faults;
        `scale_up`: the pods declare supports_scale_up (a restoration is an elastic scale-up)."""
        self.scale_up = scale_up
        self.rng, self.dialect, self.trace = rng, dialect, trace
        self._ids = ids or random.Random(rng.getrandbits(64))
        self._jitter = jitter or random.Random(rng.getrandbits(64))
        self.loop = loop
        self.clock = VirtualClock(loop)
        self.config = controller_config(idle_fault_probe=rng.random() < 0.5, fast_recovery=fast_recovery)
        self.net = Network(rng, bounds)
        # Lossy-network windows in force, and the bounds the network returns to after the last.
        self.lossy_windows = 0
        self.calm_bounds = bounds
        self.knobs = Knobs(idle=rng.random() < 0.5)
        if dialect in ("rfc", "sglang"):
            self.knobs.diagnosing_sec = 0.0
        ranks = [r for pod in PODS for r in pod]
        self.group = (SglangGroup if dialect == "sglang" else SimGroup)(ranks, dialect, self.knobs)
        self.store = SimEtcd(loop, KEY_PREFIX)
        self.table = RoutingTable()
        self.coordinator_fence = TermFence("coordinator")
        self.nm_configs = {f"10.0.0.{i + 1}:50051": nodemanager_config(i, pod, len(ranks), scale_up)
                           for i, pod in enumerate(PODS)}
        self.pods: dict[str, NodeManagerAgent | None] = {}
        self._pod_starts: dict[str, asyncio.Task[None]] = {}
        # NodeManagers stopping on their own, until their container is restarted (a crash or restart
        # of the schedule leaves them to it: the orchestrator restarts a container once it ended).
        self._pod_exits: dict[str, asyncio.Task[None]] = {}
        self._pod_ends: set[asyncio.Task[None]] = set()
        self._stop_records = {address: MemoryTextFile(f"memory:{address}/pod-stopped.json")
                              for address in self.nm_configs}
        self.controllers = ControllerReplicas(self, replicas)
        # Observations the invariants read.
        self.applies: dict[str, set[int]] = {}  # request_id → Controller lives that sent it
        self.relaunches = 0
        self.restores = 0  # capacity restorations asked for
        # Elastic scale-ups seen on the wire: the ranks each round's apply adds, and the rounds a
        # finalize(commit) was sent for (retired_rank_returns lets exactly those ranks back).
        self.scale_up_added: dict[str, frozenset[int]] = {}
        self.scale_up_committed: list[str] = []
        self.inflight: dict[str, int] = {}  # strategy request_id → calls in flight
        self.max_concurrent_strategies = 0
        self.pod_addresses = list(self.nm_configs)
        # MindCluster: hardware faults, their truth and their reports.
        self.hardware = HardwareModel(self)
        # Called with (call name, NodeManager address, args) for every Controller→NodeManager call.
        self.call_listeners: list = []

    @property
    def core(self) -> ControllerCore | None:
        """The core of the replica that acts as leader now (None: none does)."""
        proc = self.controllers.acting()
        return None if proc is None else proc.core

    @property
    def incarnation(self) -> int:
        """The latest Controller life (one replica process in one term) that acted."""
        return self.controllers.incarnation

    @property
    def fence_breaches(self) -> list[str]:
        return self.controllers.breaches

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.clock.monotonic():8.3f} {text}")

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        for address in self.nm_configs:
            self._start_pod(address)
        await self.controllers.start_all()

    def new_id(self) -> str:
        """The unique part of a Controller request id, as `random_id` makes it (12 hex digits)."""
        return f"{self._ids.getrandbits(128) >> 80:012x}"

    def _start_pod(self, address: str) -> None:
        config = self.nm_configs[address]
        agent = NodeManagerAgent(
            config, exit_hook=lambda code, reason: self._pod_exited(address, agent, code, reason), clock=self.clock,
            supervisor=lambda **callbacks: SimSupervisor(config, self.group, **callbacks),
            http=SimEngineHttp(self.group, self.clock.wall),  # type: ignore[arg-type]
            controller=lambda on_term: SimControllerClient(  # type: ignore[arg-type]
                self.net, lambda: self.core, 5.0, on_term, self.controllers.standing_by),
            stop_storage=self._stop_records[address], rng=random.Random(self._jitter.getrandbits(64)))
        self.pods[address] = agent
        # As nodemanager/main.py: the gRPC server already answers while the agent starts.
        self._pod_starts[address] = self.loop.create_task(agent.start(address))

    def _crash_pod(self, address: str, agent: NodeManagerAgent) -> None:
        """The NodeManager's container ends at once: nothing it was about to send leaves, its
        engines die with it (no exit is seen). Its tasks end with the agent's own stop, which
        nothing can observe any more and which takes no time of the world's."""
        agent.controller.dead = True  # type: ignore[attr-defined]
        agent.supervisor.kill_all()  # type: ignore[attr-defined]
        self._pod_ends.add(self.loop.create_task(self._end_crashed(self._pod_starts.pop(address), agent)))

    @staticmethod
    async def _end_crashed(start: asyncio.Task[None], agent: NodeManagerAgent) -> None:
        await start
        await agent.stop()

    def _pod_exited(self, address: str, agent: NodeManagerAgent, code: int, reason: str) -> None:
        if address in self._pod_exits or self.pods.get(address) is not agent:
            return
        self.note(f"nodemanager {address} exits with status {code}: {reason}")
        self._pod_exits[address] = self.loop.create_task(self._restart_exited(address, agent))

    async def _restart_exited(self, address: str, agent: NodeManagerAgent) -> None:
        await asyncio.sleep(POD_EXIT_DELAY_SEC)
        self.pods[address] = None
        await self._pod_starts.pop(address)
        await agent.stop()
        await asyncio.sleep(CONTAINER_RESTART_SEC)
        del self._pod_exits[address]
        self._start_pod(address)

    async def stop(self) -> None:
        await self.controllers.crash_all()
        for task in self._pod_exits.values():
            task.cancel()
        await asyncio.gather(*self._pod_exits.values(), return_exceptions=True)
        for address, nm in list(self.pods.items()):
            if nm is not None:
                self.pods[address] = None
                self._crash_pod(address, nm)
        for task in self._pod_ends:
            await task  # a crash of the agent's own stop is a finding
        self.group.close()

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
        if nm is not None and address not in self._pod_exits:
            self.pods[address] = None
            self._crash_pod(address, nm)

    def nm_restart(self, address: str) -> None:
        if self.pods.get(address) is None and address not in self._pod_exits:
            self._start_pod(address)

    async def controller_restart(self, down_sec: float) -> None:
        """Every Controller replica crashes, the Controller stays down `down_sec`, then they all
        start again over the same store."""
        await self.controllers.restart_all(down_sec)

    async def leader_crash(self, down_sec: float) -> None:
        await self.controllers.leader_crash(down_sec)

    async def leader_partition(self, sec: float) -> None:
        await self.controllers.leader_partition(sec)

    async def replica_restart(self, down_sec: float) -> None:
        await self.controllers.replica_restart(down_sec)

    def restore(self) -> None:
        """An operator asks the acting Controller for a capacity restoration, started once every
        retired rank has a place (as `motorctl restore --when-ready` does); refused when no
        Controller acts or the instance is not known yet, as the RPC would be."""
        core = self.core
        if core is None or core.runtimes.find(INSTANCE_ID) is None:
            self.note("restore: no acting Controller knows the instance")
            return
        self.restores += 1
        try:
            req = core.restorer.request(INSTANCE_ID, f"sim-restore-{self.restores}", when_ready=True, deadline_sec=60.0)
        except RestoreRefused as exc:
            self.note(f"restore refused: {exc}")
            return
        self.note(f"restore requested: {req.state} {req.message}")

    def coordinator_restart(self) -> None:
        self.table = RoutingTable()
        self.coordinator_fence = TermFence("coordinator")

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

    def observe_call(self, name: str, address: str, args: tuple, kwargs: dict | None = None) -> None:
        if name == "apply" and (kwargs or {}).get("added_dp_ranks"):
            self.scale_up_added[args[1]] = frozenset(kwargs["added_dp_ranks"])  # type: ignore[index]
        elif name == "finalize" and args[2] and args[1] in self.scale_up_added and args[1] not in self.scale_up_committed:
            self.scale_up_committed.append(args[1])
        for listener in self.call_listeners:
            listener(name, address, args)
