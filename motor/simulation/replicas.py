"""The Controller replicas of the simulated world: REAL processes' parts, one in-memory etcd.

Each replica is composed by `motor.controller.replica.ControllerReplica`, as `motor.controller.main`
composes it: a `Leadership`, the REAL `EtcdRuntimeStore` (every write fenced by the term) over the
simulated etcd (`motor.simulation.etcd`), peer clients that check the fence and carry the term
(`motor.simulation.transports`), and the REAL `LeaderElection` on a connection of its own; its
`ControllerCore` acts only while the replica leads. Leases expire in virtual time, so a crashed
leader is replaced once its lease ends, as in production.

Faults: a process crash (nothing it sends arrives any more, its lease is not revoked), a leader cut
off from etcd for a while (it loses its fence at its deadline and stops acting while another one
takes over; the calls it sends meanwhile are held on the wire up to `HOLD_SEC` and delivered
even after it was deposed, where the receivers' fences must refuse them), and the whole Controller
down at once (`restart_all`).

Observations: every call a receiver accepted, by the receiver's fence, term and sending life (a
life is one replica process in one term); `fence_breaches` lists two lives accepted in one term or
an older term accepted after a newer one (`two_leaders_act`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from motor.controller.clients import ControllerPeers
from motor.controller.fencing import Leadership
from motor.controller.metrics import ControllerMetrics
from motor.controller.persistence import EtcdRuntimeStore
from motor.controller.replica import ControllerReplica

from motor.simulation.network import CallFailed
from motor.simulation.transports import SimCoordinatorClient, SimNodeManagerClients

# The world (motor.simulation.world.World, which composes this module: not imported, no cycle).
World = Any

log = logging.getLogger("motor.simulation.replicas")

ETCD_ENDPOINT = "etcd:2379"
KEY_PREFIX = "/motor/v1"
# A call sent while its sender is cut off waits at most this long on the wire (within the deadline).
HOLD_SEC = 4.0


class SimController:
    """One Controller replica process."""

    def __init__(self, world: World, host: str) -> None:
        self.world, self.host = world, host
        self.alive = True
        self.hold_until = 0.0
        self._wire: set[asyncio.Task[object]] = set()
        config = world.config
        metrics = ControllerMetrics()
        self.leadership = Leadership(election_enabled=True, replica_id=host, address=f"{host}:50050",
                                     on_refused=metrics.not_leader)
        store = EtcdRuntimeStore([ETCD_ENDPOINT], key_prefix=KEY_PREFIX,
                                 request_timeout_sec=config.store.request_timeout_sec, leadership=self.leadership,
                                 client_factory=lambda host, port: world.store.client(self))
        timeout = config.fault_tolerance_config.dp_scale_down_config.request_timeout_sec
        nms = _ObservedNodeManagers(world, SimNodeManagerClients(world.net, world.pods, timeout, self.leadership, self))
        coordinator = SimCoordinatorClient(world.net, lambda: world.table, timeout, world.group.request,
                                           self.leadership, self, lambda: world.coordinator_fence)
        self.replica = ControllerReplica(config, self.leadership, store,
                                         ControllerPeers(nms, coordinator),  # type: ignore[arg-type]
                                         metrics=metrics, clock=world.clock, new_id=world.new_id)
        self.core = self.replica.core

    @property
    def acting(self) -> bool:
        return self.alive and self.core.acting

    async def start(self) -> None:
        await self.replica.campaign()

    async def crash(self) -> None:
        """The process dies: from now on nothing it sends arrives (its lease is left to expire)."""
        self.alive = False
        await self.replica.stop()

    # -- motor.simulation.fences.Sender ----------------------------------------------------------
    async def send(self, call: str, target: str, request_id: str, term: int) -> float:
        world = self.world
        if not self.alive:
            raise CallFailed(grpc.StatusCode.CANCELLED, "controller process gone")
        life = world.controllers.life_of(self, term)
        if call == "apply":
            world.applies.setdefault(request_id, set()).add(life)
        if call == "start_engines" and not request_id.startswith("su-"):  # a scale-up's joins relaunch nothing
            world.relaunches += 1
            world.note(f"start_engines {target} {request_id} (life {life})")
        now = world.clock.monotonic()
        return min(HOLD_SEC, self.hold_until - now) if now < self.hold_until else 0.0

    def on_wire(self, task: asyncio.Task[object]) -> None:
        self._wire.add(task)
        task.add_done_callback(self._wire.discard)

    def accepted(self, receiver: object, call: str, term: int) -> None:
        self.world.controllers.accepted(receiver, call, term, self.world.controllers.life_of(self, term))


class ControllerReplicas:
    def __init__(self, world: World, count: int) -> None:
        self.world = world
        self.hosts = [f"controller-{i}" for i in range(count)]
        self.procs: dict[str, SimController | None] = {h: None for h in self.hosts}
        self._all: list[SimController] = []
        self._lives: dict[tuple[int, int], int] = {}
        self._receivers: dict[object, dict[int, set[int]]] = {}
        self.incarnation = 0
        self.breaches: list[str] = []

    # -- lives and observations ------------------------------------------------------------------
    def life_of(self, proc: SimController, term: int) -> int:
        """0 for a call without a term (a Controller without election)."""
        if not term:
            return 0
        key = (id(proc), term)
        if key not in self._lives:
            self._lives[key] = len(self._lives) + 1
        return self._lives[key]

    def acting(self) -> SimController | None:
        proc = None
        for p in self.procs.values():
            if p is not None and p.acting and (proc is None or p.leadership.term > proc.leadership.term):
                proc = p
        if proc is None:
            return None
        life = self._lives.get((id(proc), proc.leadership.term)) or self.life_of(proc, proc.leadership.term)
        if life > self.incarnation:
            self.incarnation = life
            self.world.note(f"{proc.host} acts as leader of term {proc.leadership.term} (life {life})")
        return proc

    def standing_by(self) -> bool:
        return any(p is not None for p in self.procs.values())

    def leader(self) -> SimController | None:
        """The replica that holds a term now (acting or still taking over)."""
        leading = [p for p in self.procs.values() if p is not None and p.leadership.leading]
        return max(leading, key=lambda p: p.leadership.term) if leading else None

    def accepted(self, receiver: object, call: str, term: int, life: int) -> None:
        seen = self._receivers.setdefault(receiver, {})
        newest = max(seen, default=0)
        lives = seen.setdefault(term, set())
        label = getattr(receiver, "_label", "a receiver")
        if lives and life not in lives:
            self.breaches.append(f"{label} accepted {call} of life {life} in term {term}, in which "
                                 f"life {sorted(lives)} already acted")
        lives.add(life)
        if term < newest:
            self.breaches.append(f"{label} accepted {call} of term {term} (life {life}) after term {newest}")

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, host: str) -> None:
        if self.procs[host] is not None:
            return
        proc = self.procs[host] = SimController(self.world, host)
        self._all.append(proc)
        self.world.note(f"{host} starts")
        await proc.start()

    async def start_all(self) -> None:
        for host in self.hosts:
            await self.start(host)

    async def crash(self, host: str) -> None:
        proc, self.procs[host] = self.procs[host], None
        if proc is not None:
            self.world.note(f"{host} crashes (term {proc.leadership.term if proc.leadership.leading else '-'})")
            await proc.crash()

    async def crash_all(self) -> None:
        for host in self.hosts:
            await self.crash(host)

    async def restart_all(self, down_sec: float) -> None:
        """Every replica crashes, the Controller stays down `down_sec`, then every one starts again; a
        crash while all are down changes nothing."""
        if not self.standing_by():
            return
        await self.crash_all()
        await asyncio.sleep(down_sec)
        await self.start_all()

    async def leader_crash(self, down_sec: float) -> None:
        """The leader's process dies; it starts again (a standby then) after `down_sec`."""
        leader = self.leader()
        if leader is None:
            return
        await self.crash(leader.host)
        await asyncio.sleep(down_sec)
        await self.start(leader.host)

    async def replica_restart(self, down_sec: float) -> None:
        """A standby's process dies and starts again after `down_sec` (none runs: nothing happens)."""
        leader = self.leader()
        standbys = [h for h, p in self.procs.items() if p is not None and p is not leader]
        if not standbys:
            return
        await self.crash(standbys[0])
        await asyncio.sleep(down_sec)
        await self.start(standbys[0])

    async def leader_partition(self, sec: float) -> None:
        """The leader is cut off from etcd for `sec`; what it sends meanwhile is held on the wire."""
        leader = self.leader()
        if leader is None:
            return
        etcd, clock = self.world.store, self.world.clock
        self.world.note(f"{leader.host} (term {leader.leadership.term}) loses etcd for {sec:.1f}s")
        etcd.cut(leader.host)
        leader.hold_until = clock.monotonic() + sec
        try:
            await asyncio.sleep(sec)
        finally:
            etcd.heal(leader.host)
            leader.hold_until = 0.0
        self.world.note(f"{leader.host} reaches etcd again")


class _ObservedNodeManagers:
    """The replica's NodeManager clients, seen by the invariants: which strategies have calls in flight."""

    def __init__(self, world: World, clients: SimNodeManagerClients) -> None:
        self._world, self._clients = world, clients

    def get(self, address: str):
        return _ObservedClient(self._world, self._clients.get(address))

    async def close(self) -> None:
        pass


class _ObservedClient:
    def __init__(self, world: World, client) -> None:
        self._world, self._client = world, client

    def __getattr__(self, name: str):
        target = getattr(self._client, name)
        if name not in ("guard", "status", "apply", "finalize", "stop_engines", "start_engines", "stop_pod"):
            return target

        async def call(*args, **kwargs):
            world = self._world
            request_id = args[1] if name != "stop_pod" else args[0]
            client = self._client
            if client._sender is None or (client._sender.alive and client._leadership.leading):
                world.observe_call(name, client.address, args, kwargs)  # it leaves a live leader
            strategy = request_id.split("-")[0] in ("sd", "reconf", "fr", "restore", "su")
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
