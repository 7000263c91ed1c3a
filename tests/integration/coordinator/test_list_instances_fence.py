"""A leader's read of what the Coordinator publishes is fenced like its writes: the Controller's
real Coordinator client sends ListInstances with its leader term, and a real Coordinator records
that term at the read, so a deposed leader's SET cannot land between the new leader's read and its
first SET (the new leader would withdraw a view that is no longer the published one). A read
without a term (an operator's) still answers; an older or malformed term is refused."""

from __future__ import annotations

import math

import grpc
import pytest

from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.common.metadata import LEADER_TERM_METADATA
from motor.controller.clients import CoordinatorClient, PeerCallError
from motor.controller.fencing import Fence, Leadership
from motor.coordinator.config import CoordinatorConfig
from motor.coordinator.main import CoordinatorService

pytestmark = pytest.mark.timeout(60)


def _leader(term: int) -> Leadership:
    leadership = Leadership(election_enabled=True, replica_id=f"c-{term}")
    leadership.adopt(Fence(term, b"/motor/v1/leader", math.inf))
    return leadership


def _view(instance_id: int) -> common_pb2.Instance:
    view = common_pb2.Instance(id=instance_id, model="m", dp_size=1)
    view.endpoints.add(id=0, ip="127.0.0.2", business_port=8000)
    return view


async def test_a_deposed_leaders_set_after_the_new_leaders_read_is_refused() -> None:
    service = CoordinatorService(CoordinatorConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "http": {"host": "127.0.0.1", "port": 0}}))
    info = await service.start()
    address = f"127.0.0.1:{info['grpc_port']}"
    old, new = CoordinatorClient(address, None, 5.0, leadership=_leader(5)), \
        CoordinatorClient(address, None, 5.0, leadership=_leader(6))
    try:
        assert await old.refresh(coordinator_pb2.REFRESH_EVENT_SET, [_view(1)], 10) == 10
        read = await new.list_instances()
        assert [p.instance.id for p in read.instances] == [1] and read.leader_term == 6
        with pytest.raises(PeerCallError) as refused:
            await old.refresh(coordinator_pb2.REFRESH_EVENT_SET, [_view(2)], 20)
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "leader term 5 is older than term 6" in refused.value.details
        with pytest.raises(PeerCallError) as stale_read:
            await old.list_instances()
        assert stale_read.value.code == grpc.StatusCode.FAILED_PRECONDITION

        async with open_channel(address) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            operator = await stub.ListInstances(coordinator_pb2.ListInstancesRequest(), timeout=5)
            assert [p.instance.id for p in operator.instances] == [1] and operator.leader_term == 6
            with pytest.raises(grpc.aio.AioRpcError) as malformed:
                await stub.ListInstances(coordinator_pb2.ListInstancesRequest(), timeout=5,
                                         metadata=((LEADER_TERM_METADATA, "6x"),))
            assert malformed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert service.term_fence.term == 6 and service.term_fence.refused == 3
    finally:
        await old.close()
        await new.close()
        await service.stop()
