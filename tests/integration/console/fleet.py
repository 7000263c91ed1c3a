"""A synthetic fleet behind the real console: FtRuntimeStore instances, a TimelineBook and the
Controller's RuntimeBroadcaster, served by the console's own routes on an aiohttp server (port 0)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestServer

from gen.motor.v1 import controller_pb2
from motor.controller.console.app import add_console_routes
from motor.controller.console.feed import ConsoleFeed, ConsoleSource
from motor.controller.fault_tolerance.timeline import TimelineBook
from motor.controller.model.runtime import FtPhase, FtRuntimeStore
from motor.controller.status import RuntimeBroadcaster

Kind = controller_pb2.TimelineEventKind


class SyntheticFleet:
    def __init__(self, instances: int, ranks: int, *, leadership: dict | None = None, wall: float = 1_000_000.0) -> None:
        self.runtimes = FtRuntimeStore(scale_down_enabled=True)
        self.book = TimelineBook()
        self.broadcaster = RuntimeBroadcaster()
        self.evidence: dict[int, dict] = {}
        self.leadership = leadership or {"election_enabled": False, "is_leader": True, "replica_id": "synthetic",
                                         "address": "", "leader_id": "", "leader_address": "", "term": 0}
        self.wall = wall
        for iid in range(1, instances + 1):
            self.runtimes.create(iid, list(range(ranks)), "instance_reconfiguration")
            self.runtimes.set_published(iid, True)
        self.source = ConsoleSource(
            runtimes=self.runtimes.all, evidence=lambda iid: self.evidence.get(iid, {}),
            strategy=lambda iid: "", waits=lambda iid: [], transactions=self.book.transactions,
            leadership=lambda: self.leadership, subscribe=self.broadcaster.subscribe,
            unsubscribe=self.broadcaster.unsubscribe, wall=lambda: self.wall, scale_down_enabled=True)

    def scale_down(self, instance_id: int, rank: int, *, commit: bool) -> None:
        """A round on `rank` (its removal pending), committed when `commit`, with a timeline of its stages."""
        rid = f"sd-{instance_id}-{rank}"
        if commit:
            self.runtimes.set_phase(instance_id, FtPhase.POST_SCALE_CLEANUP)
            self.runtimes.commit_round(instance_id, [rank])
            self.runtimes.set_phase(instance_id, FtPhase.SCALED_DOWN_RUNNING)
        else:
            self.runtimes.set_phase(instance_id, FtPhase.DECIDING)
            self.runtimes.begin_round(instance_id, rid, [rank])
            self.runtimes.set_phase(instance_id, FtPhase.SCALING_DOWN)
            txn = self.book.begin(instance_id, "dp_scale_down", rid, self.wall)
            txn.add(Kind.TIMELINE_EVENT_KIND_EVIDENCE, "DEAD", self.wall - 0.05, ranks=[rank],
                    observed_at_unix_sec=self.wall - 0.05, received_at_unix_sec=self.wall - 0.04,
                    detail=f"rank {rank} DEAD")
            for step, at, took in (("guard", 0.01, 0.002), ("status", 0.02, 0.003), ("apply", 0.03, 0.004),
                                   ("status", 0.05, 0.02), ("finalize", 0.08, 0.002), ("publish", 0.09, 0.001)):
                txn.call(step, "127.0.0.2:1", self.wall + at, took, commit=(step == "finalize"))
            txn.finish("succeeded", self.wall + 0.1)
        self.broadcaster.changed(instance_id)

    async def serve(self, port: int = 0, **feed_kwargs) -> TestServer:
        app = web.Application()
        add_console_routes(app, ConsoleFeed(self.source, **{"refresh_sec": 0.5, **feed_kwargs}))
        server = TestServer(app, host="127.0.0.1", port=port)
        await server.start_server()
        return server
