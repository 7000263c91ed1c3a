"""One Controller replica's parts and their election-driven lifecycle, without sockets.

The process (`motor.controller.main`) and the simulation (`motor.simulation.replicas`) both build
a replica here from what they inject: the `Leadership` every check goes through, the runtime store
(fenced by that leadership when the replicas elect), the peer clients (which carry its term), and
the clock. Without election the core acts at once (`start_alone`); with it, `campaign` runs the
leader election on a connection of its own to the store's etcd and the core acts only while this
replica leads (`ControllerCore.elected` / `deposed`). `stop` resigns first, so a standby takes
over while this one finishes stopping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from motor.controller.clients import ControllerPeers
from motor.controller.clock import Clock, SystemClock
from motor.controller.config import ControllerConfig
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.strategy.base import random_id
from motor.controller.election import LeaderElection, ReplicaIdentity
from motor.controller.fencing import Leadership
from motor.controller.metrics import ControllerMetrics
from motor.controller.persistence import EtcdRuntimeStore, RuntimeStore

log = logging.getLogger(__name__)


class ControllerReplica:
    def __init__(self, config: ControllerConfig, leadership: Leadership, store: RuntimeStore, peers: ControllerPeers,
                 *, metrics: ControllerMetrics, clock: Clock | None = None,
                 new_id: Callable[[], str] = random_id) -> None:
        self.config = config
        self.leadership = leadership
        self.store = store
        self.clock = clock or SystemClock()
        self.core = ControllerCore(config, store, peers, self.clock, leadership=leadership, metrics=metrics,
                                   new_id=new_id)
        self.election: LeaderElection | None = None

    async def start_alone(self) -> None:
        """A lone Controller: restored before it serves."""
        log.info("controller %s acts alone (no leader election: %s)", self.leadership.replica_id,
                 "leader_election.mode=off" if self.config.store.etcd_endpoints else "no etcd")
        await self.core.start()

    async def campaign(self) -> None:
        """Campaigns for the store's leader key (the replica serves read-only meanwhile); returns
        once the first round has ended (and, when it was won, once the takeover is done)."""
        store = self.store
        assert isinstance(store, EtcdRuntimeStore), "leader election needs the etcd store"
        config = self.config.leader_election
        leadership = self.leadership
        self.election = LeaderElection(
            store.connection(), store.leader_key, config.lease_ttl_sec,
            ReplicaIdentity(leadership.replica_id, leadership.address), leadership,
            self.core.elected, self.core.deposed, clock=self.clock.monotonic)
        log.info("controller replica %s at %s campaigns for %s (lease ttl %ds)", leadership.replica_id,
                 leadership.address, store.leader_key, config.lease_ttl_sec)
        await self.core.start(self.election)

    async def resign(self) -> None:
        """Gives the term up (revokes the lease) before the process goes deaf."""
        if self.election is not None:
            await self.election.close(resign=True)

    async def stop(self) -> None:
        await self.core.stop()
