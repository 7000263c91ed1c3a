"""WatchFaultToleranceStatus against a real Controller on port 0: each message's changed_at_unix_sec is
when the instance's state came about, not when the stream got round to sending it, both in the
snapshot a new watcher starts with and for a change while it watches."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.controller.main import ControllerService

from .controller_support import controller_service, register_request

pytestmark = pytest.mark.timeout(60)

POD_IP = "127.0.0.2"
INSTANCE = 5


@pytest.fixture
async def controller() -> AsyncIterator[tuple[ControllerService, controller_pb2_grpc.ControllerStub]]:
    service = controller_service()
    info = await service.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            yield service, controller_pb2_grpc.ControllerStub(channel)
    finally:
        await service.stop()


async def test_watch_says_when_each_state_came_about(controller) -> None:
    service, stub = controller
    assert (await stub.Register(register_request(POD_IP, INSTANCE), timeout=5)).accepted
    registered = time.time()
    watch = stub.WatchFaultToleranceStatus(controller_pb2.WatchFaultToleranceStatusRequest(instance_ids=[INSTANCE]),
                                           timeout=30)
    try:
        first = await watch.read()
        # The state was made by the registration, which returned before the watch was opened.
        assert first.runtime.instance_id == INSTANCE and first.changed_at_unix_sec <= registered
        assert first.changed_at_unix_sec == service.core.broadcaster.changed_at(INSTANCE)

        # A change while watching: a heartbeat naming a rank the pod does not host sets last_error.
        sent = time.time()
        await stub.Heartbeat(controller_pb2.HeartbeatRequest(pod_ip=POD_IP, instance_id=INSTANCE,
                                                             alive_endpoint_ids=[0, 1, 7], seq=1), timeout=5)
        answered = time.time()
        change = await watch.read()
        assert "[7]" in change.runtime.last_error
        assert sent <= change.changed_at_unix_sec <= answered
    finally:
        watch.cancel()
