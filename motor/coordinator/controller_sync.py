"""A (restarted) Coordinator's first serving view: asked of the Controller leader, not waited for.

With `controller_addresses` configured, the Coordinator calls RequestPublication on the Controller
leader (followed among the replicas, `motor.common.leader_client`) as soon as it serves: the leader
answers only after its whole serving view (a SET through the one projection every publication
uses) was acknowledged here, so the routing table holds the survivors' view before the first
request is routed (requests that arrive earlier are held, `hold_when_unavailable_sec`). It stops
after the first acknowledged SET from anyone. Each call has the Coordinator's deadline; between
attempts it waits a capped, doubling backoff, so it keeps trying while no replica leads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from gen.motor.v1 import controller_pb2
from motor.common.config.tls import ClientTlsConfig
from motor.common.leader_client import LeaderFollowingClient, LeaderUnavailable
from motor.coordinator.routing import RoutingTable

log = logging.getLogger(__name__)

# The leader answers after its SET here was acknowledged (itself bounded by its request timeout).
CONTROLLER_CALL_TIMEOUT_SEC = 10.0
_FIRST_BACKOFF_SEC = 0.2
_MAX_BACKOFF_SEC = 2.0


class ControllerSync:
    def __init__(self, addresses: Sequence[str], table: RoutingTable, *, timeout_sec: float,
                 tls: ClientTlsConfig | None = None) -> None:
        self._client = LeaderFollowingClient(addresses, timeout_sec=timeout_sec, tls=tls,
                                             label="coordinator controller client")
        self._table = table
        self._start_revision = table.revision
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        self.attempts = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-sync")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.close()

    async def _run(self) -> None:
        backoff = _FIRST_BACKOFF_SEC
        failing = ""
        resp: controller_pb2.RequestPublicationResponse | None = None
        while self._table.revision == self._start_revision:
            self.attempts += 1
            try:
                resp = await self._client.call("RequestPublication", controller_pb2.RequestPublicationRequest())
            except (LeaderUnavailable, grpc.aio.AioRpcError) as exc:
                text = str(exc) if isinstance(exc, LeaderUnavailable) else f"{exc.code().name}: {exc.details()}"
                if text != failing:
                    log.warning("asking the Controller leader for the serving view failed (attempt %d): %s; "
                                "retrying every <= %gs", self.attempts, text, _MAX_BACKOFF_SEC)
                failing = text
                await asyncio.sleep(backoff)
                backoff = min(_MAX_BACKOFF_SEC, backoff * 2)
                continue
            break
        if resp is not None:
            log.info("serving view synced from the Controller leader at %s (term %d): instances %s, revision %d",
                     self._client.address, resp.term, list(resp.instance_ids), self._table.revision)
        else:
            log.info("serving view synced from the Controller leader: its SET arrived (revision %d) after %d "
                     "request(s)", self._table.revision, self.attempts)
        self.synced.set()
