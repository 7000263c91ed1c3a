"""Leader election and fencing of Controller replicas against a real etcd (the shared
`etcd_endpoint` fixture; every test its own key prefix), in process.

- LeaderElection: one of two campaigners wins; the other observes it; a resignation hands over at
  once, a silent leader (no keepalive, no resignation: a crash) after its lease.
- Fencing: a leader that still believes it leads (its process frozen: no clock check has run) is
  refused by etcd itself, and the refusal loses its term.
- Two ControllerServices: the standby refuses writes with UNAVAILABLE naming the leader in
  trailing metadata and answers status reads with the leadership; a NodeManager-side
  LeaderFollowingClient started at the standby follows to the leader, and to the next one.
- A receiver's term fence: the Coordinator refuses a Refresh of an older leader term.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.common.leader_client import LeaderFollowingClient, LeaderUnavailable
from motor.common.metadata import LEADER_ADDRESS_METADATA, LEADER_TERM_METADATA
from motor.controller.config import ControllerConfig
from motor.controller.election import LeaderElection, ReplicaIdentity
from motor.controller.fencing import Fence, Leadership
from motor.controller.main import ControllerService
from motor.controller.persistence import EtcdRuntimeStore, PersistedInstance
from motor.controller.persistence.errors import FencedWriteError
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService
from motor.testing.waits import async_wait_for
from nodemanager.controller_client import ControllerClient

pytestmark = [pytest.mark.timeout(120), pytest.mark.etcd]

TTL = 2


def _prefix() -> str:
    return f"/election-test-{uuid.uuid4().hex[:10]}"


class Candidate:
    """One LeaderElection with its store, recording elections and depositions."""

    def __init__(self, endpoint: str, prefix: str, name: str) -> None:
        self.leadership = Leadership(election_enabled=True, replica_id=name, address=f"{name}:1")
        self.store = EtcdRuntimeStore([endpoint], key_prefix=prefix, request_timeout_sec=3.0,
                                      leadership=self.leadership)
        self.elected: list[Fence] = []
        self.deposed: list[str] = []
        self.election = LeaderElection(self.store.connection(), self.store.leader_key, TTL,
                                       ReplicaIdentity(name, f"{name}:1"), self.leadership, self.elected.append,
                                       self._deposed)

    async def _deposed(self, reason: str) -> None:
        self.deposed.append(reason)

    async def close(self, resign: bool = True) -> None:
        await self.election.close(resign=resign)
        await self.store.close()


RECORD = PersistedInstance(instance_id=1, phase="NORMAL", generation=1, original_dp_ranks=(0, 1), dead_committed=(),
                           fallback_strategy="instance_reconfiguration", topology=b"t")


async def test_one_leads_the_other_observes_and_a_resignation_hands_over_at_once(etcd_endpoint: str) -> None:
    prefix = _prefix()
    a, b = Candidate(etcd_endpoint, prefix, "a"), Candidate(etcd_endpoint, prefix, "b")
    try:
        await a.election.start()
        await b.election.start()
        assert len(a.elected) == 1 and b.elected == []
        assert a.leadership.leading and not b.leadership.leading
        assert b.leadership.leader.leader_id == "a" and b.leadership.leader.term == a.elected[0].term
        await a.store.put(RECORD, None)  # the leader's fenced write lands
        await a.election.close(resign=True)
        await async_wait_for(lambda: len(b.elected) == 1, 20.0, "b elected after a resigned")
        assert b.elected[0].term > a.elected[0].term and b.leadership.leading
        assert not a.leadership.leading
        with pytest.raises(FencedWriteError, match="not the leader"):
            await a.store.put(RECORD, 1)  # refused before anything is sent
    finally:
        await a.close()
        await b.close()


async def test_a_silent_leader_is_replaced_after_its_lease_and_etcd_refuses_its_writes(etcd_endpoint: str) -> None:
    prefix = _prefix()
    a, b = Candidate(etcd_endpoint, prefix, "a"), Candidate(etcd_endpoint, prefix, "b")
    try:
        await a.election.start()
        await b.election.start()
        old = a.elected[0]
        await a.store.put(RECORD, None)
        # A crash: no keepalive, no resignation. The fence is made to believe it still leads, as a
        # frozen process would (no clock check runs while it is stopped).
        await a.election.close(resign=False)
        a.leadership.adopt(Fence(old.term, old.key, math.inf, lease_id=old.lease_id))
        await async_wait_for(lambda: len(b.elected) == 1, TTL * 5, "b elected once a's lease expired")
        assert b.elected[0].term > old.term
        with pytest.raises(FencedWriteError, match=rf"leader key .* is of term {b.elected[0].term}, not term {old.term}"):
            await a.store.put(dataclasses.replace(RECORD, generation=2), 1)
        assert not a.leadership.fence.leading  # the refusal lost the term
        await b.store.put(dataclasses.replace(RECORD, generation=2), 1)  # the new leader's write lands
        assert (await b.store.load(1)).generation == 2
    finally:
        await a.close(resign=False)
        await b.close()


def _controller_config(endpoint: str, prefix: str, name: str) -> ControllerConfig:
    return ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
        "store": {"etcd_endpoints": [endpoint], "key_prefix": prefix, "request_timeout_sec": 3.0},
        "leader_election": {"lease_ttl_sec": TTL, "replica_id": name, "standby_refresh_interval_sec": 0.2},
    })


@pytest.fixture
async def replicas(etcd_endpoint: str) -> AsyncIterator[list[tuple[ControllerService, str]]]:
    prefix = _prefix()
    started: list[tuple[ControllerService, str]] = []
    try:
        for name in ("c-0", "c-1"):
            service = ControllerService(_controller_config(etcd_endpoint, prefix, name))
            info = await service.start()
            started.append((service, f"127.0.0.1:{info['grpc_port']}"))
        yield started
    finally:
        for service, _ in started:
            await service.stop()


async def _status(address: str) -> controller_pb2.GetFaultToleranceStatusResponse:
    async with open_channel(address) as channel:
        return await controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
            controller_pb2.GetFaultToleranceStatusRequest(), timeout=5)


def _heartbeat() -> controller_pb2.HeartbeatRequest:
    return controller_pb2.HeartbeatRequest(pod_ip="127.0.0.2", instance_id=1, alive_endpoint_ids=[0], seq=1)


async def test_the_standby_refuses_writes_naming_the_leader_and_clients_follow(replicas) -> None:
    (leader, leader_addr), (standby, standby_addr) = replicas
    assert leader.core.acting and not standby.core.acting
    for address in (leader_addr, standby_addr):
        status = await _status(address)
        assert status.leadership.election_enabled and status.leadership.leader_id == "c-0"
        assert status.leadership.leader_address == leader_addr and status.leadership.term > 0
        assert status.leadership.is_leader == (address == leader_addr)
    async with open_channel(standby_addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await controller_pb2_grpc.ControllerStub(channel).Heartbeat(_heartbeat(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"standby; the leader is c-0 at {leader_addr}" in info.value.details()
    assert (LEADER_ADDRESS_METADATA, leader_addr) in list(info.value.trailing_metadata())

    terms: list[int] = []
    client = LeaderFollowingClient([standby_addr, leader_addr], timeout_sec=3.0, on_term=terms.append)
    try:
        resp = await client.call("Heartbeat", _heartbeat())
        assert not resp.known  # the leader answered (it does not know this pod)
        assert client.address == leader_addr and client.term == terms[-1] == leader.core.leadership.term
        first_term = client.term
        await leader.stop()  # resigns: the standby takes over at once
        await async_wait_for(lambda: standby.core.acting, 20.0, "the standby acting")
        resp = await client.call("Heartbeat", _heartbeat())
        assert client.address == standby_addr and client.term > first_term
    finally:
        await client.close()


async def test_the_heartbeat_stream_follows_the_leader_and_carries_its_term(replicas) -> None:
    (leader, leader_addr), (standby, standby_addr) = replicas
    terms: list[int] = []
    client = ControllerClient([standby_addr, leader_addr], timeout_sec=3.0, on_term=terms.append)
    try:
        # The stream to the standby ends UNAVAILABLE naming the leader: that heartbeat goes unary to
        # it, and the next one is a message of a stream to the leader, its term in the answer.
        await client.heartbeat(_heartbeat())
        assert client.address == leader_addr and client.heartbeats.unary_fallbacks == 1
        terms.clear()
        assert not (await client.heartbeat(_heartbeat())).known
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (2, 1)
        first_term = leader.core.leadership.term
        assert client.term == first_term and terms == [first_term]
        await leader.stop()  # resigns: the standby takes over at once
        await async_wait_for(lambda: standby.core.acting, 20.0, "the standby acting")
        await client.heartbeat(_heartbeat())  # the stream broke with the leader: unary to the new one
        await client.heartbeat(_heartbeat())
        assert client.address == standby_addr and client.term == standby.core.leadership.term > first_term
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (3, 2)
    finally:
        await client.close()


async def test_no_leader_at_all_is_leader_unavailable(replicas) -> None:
    (leader, leader_addr), (_standby, standby_addr) = replicas
    # Both replicas answer, neither acts: the standby names a leader that is not answering.
    leader.core._acting = False
    client = LeaderFollowingClient([standby_addr, leader_addr], timeout_sec=3.0)
    try:
        with pytest.raises(LeaderUnavailable, match="no Controller replica leads now"):
            await client.call("Heartbeat", _heartbeat())
    finally:
        leader.core._acting = True
        await client.close()


async def test_the_coordinator_refuses_a_refresh_of_an_older_leader_term(tmp_path) -> None:
    config = CoordinatorConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "http": {"host": "127.0.0.1", "port": 0}, "state_dir": str(tmp_path)})
    service = CoordinatorService(config)
    info = await service.start()
    try:
        view = common_pb2.Instance(id=1, model="m", dp_size=1)
        view.endpoints.add(id=0, ip="127.0.0.2", business_port=8000)
        async with open_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)

            async def refresh(revision: int, term: int | None):
                md = ((LEADER_TERM_METADATA, str(term)),) if term is not None else None
                return await stub.Refresh(coordinator_pb2.RefreshRequest(
                    event=coordinator_pb2.REFRESH_EVENT_SET, instances=[view], revision=revision),
                    timeout=5, metadata=md)

            assert (await refresh(10, 7)).revision == 10
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await refresh(20, 5)  # a deposed leader, even with a newer revision
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "leader term 5 is older than term 7" in refused.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as unfenced:
                await refresh(30, None)  # no term once a term was seen: not the elected leader's call
            assert unfenced.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "carries no leader term" in unfenced.value.details()
            assert (await refresh(40, 8)).revision == 40
        assert service.term_fence.term == 8 and service.term_fence.refused == 2
    finally:
        await service.stop()
    # Restarted, it still knows term 8: a deposed leader's first Refresh is refused.
    assert CoordinatorService(config).term_fence.term == 8
