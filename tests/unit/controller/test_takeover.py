"""Leader takeover in ControllerCore, with a manual clock and in-memory peers: a replica acts only while
it leads and has taken over; a takeover forgets everything, restores from the store with the RFC §5
restart rule and learns what the Coordinator routes to (and its revision); losing the term stops
everything, and a standby reports what the store holds."""

from __future__ import annotations

import asyncio
import math

import grpc

from gen.motor.v1 import coordinator_pb2
from motor.controller.clients import ControllerPeers, PeerCallError
from motor.controller.clock import ManualClock
from motor.controller.core import ControllerCore
from motor.controller.fencing import Fence, Leadership
from motor.controller.hardware.monitor import ResourceMonitor
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import MemoryRuntimeStore
from motor.controller.persistence.persister import read_only_view
from motor.controller.serving import EventPusher

from motor.testing.waits import turns_until

from .controller_fakes import FakeCoordinator, FakeNodeManagers, assemble, make_config, two_pods


class ListingCoordinator(FakeCoordinator):
    """The Coordinator double that also answers ListInstances (what a new leader reads)."""

    def __init__(self, revision: int = 0) -> None:
        super().__init__()
        self.revision = revision

    async def refresh(self, event, instances, revision):
        self.revision = revision
        return await super().refresh(event, instances, revision)

    async def list_instances(self) -> coordinator_pb2.ListInstancesResponse:
        resp = coordinator_pb2.ListInstancesResponse(revision=self.revision)
        for iid, ranks in self.view.items():
            item = resp.instances.add()
            item.instance.id = iid
            for rank in ranks:
                item.instance.endpoints.add(id=rank)
        return resp


def _replica(store: MemoryRuntimeStore, coordinator: FakeCoordinator, cluster=None) -> ControllerCore:
    leadership = Leadership(election_enabled=True, replica_id="c-1", address="c-1:1")
    peers = ControllerPeers(FakeNodeManagers(cluster or two_pods()), coordinator)  # type: ignore[arg-type]
    return ControllerCore(make_config(), store, peers, ManualClock(), leadership=leadership)


async def test_the_pusher_learns_the_published_view_and_the_revision_floor() -> None:
    coordinator = ListingCoordinator(revision=10**18)
    coordinator.view = {7: [0, 2, 3]}
    pusher = EventPusher(coordinator, lambda: 1.0)  # type: ignore[arg-type]
    assert await pusher.learn() == {7: (0, 2, 3)}
    await pusher.set_all(list)
    assert coordinator.revision > 10**18  # a clock behind the previous leader's still publishes


async def test_a_replica_acts_only_after_taking_over_and_stops_when_deposed() -> None:
    store = MemoryRuntimeStore()
    # What a previous leader left: an instance in SCALING_DOWN, published {0, 1, 2, 3}.
    cluster = two_pods()
    previous = ControllerCore(make_config(), store, ControllerPeers(FakeNodeManagers(cluster), None),  # type: ignore[arg-type]
                              ManualClock())
    await assemble(previous, cluster)
    previous.runtimes.set_phase(7, FtPhase.DECIDING)
    previous.runtimes.set_phase(7, FtPhase.SCALING_DOWN)
    await previous.persister.persist(7)

    coordinator = ListingCoordinator(revision=5)
    coordinator.view = {7: [0, 1, 2, 3]}
    core = _replica(store, coordinator, cluster)
    assert not core.acting and core.status_runtimes() == []
    core._standby_view = await read_only_view(store, True)
    assert [(r.instance_id, r.phase) for r in core.status_runtimes()] == [(7, FtPhase.SCALING_DOWN)]

    fence = Fence(11, b"/p/leader", math.inf)
    core.leadership.adopt(fence)
    core.elected(fence)
    await core._promotion
    assert core.acting and core.takeovers == 1
    runtime = core.runtimes.get(7)
    # The interrupted round is abandoned: RECONFIGURING, written back to the store, never re-applied.
    assert runtime.phase is FtPhase.RECONFIGURING and "restarted during SCALING_DOWN" in runtime.last_error
    assert (await store.load(7)).phase == "RECONFIGURING"
    assert not runtime.serving_published  # restored unpublished
    assert core.pusher.coordinator_publisher._published == {7: (0, 1, 2, 3)}
    assert core.metrics.registry.get_sample_value("motor_controller_leader") == 1

    fence.lose("etcd says the lease expired")
    assert not core.acting  # at once, before the demotion has run
    await core.deposed("etcd says the lease expired")
    assert core.runtimes.all() == [] and core.registry.all() == []
    assert core.metrics.registry.get_sample_value("motor_controller_leader") == 0
    assert core.metrics.registry.get_sample_value("motor_controller_leadership_changes_total",
                                                  {"event": "deposed"}) == 1
    await core.stop()


class SlowListingCoordinator(ListingCoordinator):
    """ListInstances answers after a few event-loop turns, as a real RPC does; `down_lists` first
    ones fail."""

    def __init__(self, revision: int = 0, down_lists: int = 0) -> None:
        super().__init__(revision)
        self.down_lists = down_lists
        self.lists = 0

    async def list_instances(self) -> coordinator_pb2.ListInstancesResponse:
        self.lists += 1
        for _ in range(200):
            await asyncio.sleep(0)
        if self.lists <= self.down_lists:
            raise PeerCallError("list_instances", self.address, grpc.StatusCode.UNAVAILABLE, "down")
        return await super().list_instances()


async def _restored_reconfiguring(cluster) -> MemoryRuntimeStore:
    """What a previous leader left: instance 7 in SCALING_DOWN (restored as RECONFIGURING)."""
    store = MemoryRuntimeStore()
    peers = ControllerPeers(FakeNodeManagers(cluster), None)  # type: ignore[arg-type]
    previous = ControllerCore(make_config(), store, peers, ManualClock())
    await assemble(previous, cluster)
    previous.runtimes.set_phase(7, FtPhase.DECIDING)
    previous.runtimes.set_phase(7, FtPhase.SCALING_DOWN)
    await previous.persister.persist(7)
    return store


async def _take_over_and_reconfigure(core: ControllerCore, cluster) -> None:
    fence = Fence(11, b"/p/leader", math.inf)
    core.leadership.adopt(fence)
    core.elected(fence)
    await core._promotion
    await turns_until(lambda: cluster.named("start_engines") and core.faults.running(7) is None,
                      10_000, "the restored reconfiguration did not finish")


async def test_a_new_leaders_first_drain_withdraws_what_the_coordinator_routes_to(monkeypatch) -> None:
    """However the rest of the takeover goes (here the hardware monitor's start delivers what its
    sources hold, which wakes the fault manager, and takes a while), the restored reconfiguration's
    drain withdraws what the Coordinator routes to."""

    async def slow_start(monitor, on_faults) -> None:
        on_faults([])
        for _ in range(200):
            await asyncio.sleep(0)

    monkeypatch.setattr(ResourceMonitor, "start", slow_start)
    cluster = two_pods()
    store = await _restored_reconfiguring(cluster)
    coordinator = SlowListingCoordinator(revision=5)
    coordinator.view = {7: [0, 1, 2, 3]}
    core = _replica(store, coordinator, cluster)
    try:
        await _take_over_and_reconfigure(core, cluster)
    finally:
        await core.stop()
    assert coordinator.events[0] == ("DEL", {7: [0, 1, 2, 3]}), coordinator.events


async def test_a_drain_unsure_of_the_published_view_reads_it_from_the_coordinator() -> None:
    """The Coordinator did not answer the takeover's read: the drain lists what it routes to itself."""
    cluster = two_pods()
    store = await _restored_reconfiguring(cluster)
    coordinator = SlowListingCoordinator(revision=5, down_lists=1)
    coordinator.view = {7: [0, 1, 2, 3]}
    core = _replica(store, coordinator, cluster)
    try:
        await _take_over_and_reconfigure(core, cluster)
    finally:
        await core.stop()
    assert coordinator.events[0] == ("DEL", {7: [0, 1, 2, 3]}), coordinator.events
