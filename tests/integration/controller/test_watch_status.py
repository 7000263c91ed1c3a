"""WatchFaultToleranceStatus against a real Controller on port 0: each message's changed_at_unix_sec is
when the instance's state came about, not when the stream got round to sending it, both in the
snapshot a new watcher starts with and for a change while it watches."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService

pytestmark = pytest.mark.timeout(60)

POD_IP = "127.0.0.2"
INSTANCE = 5


@pytest.fixture
async def controller() -> AsyncIterator[tuple[ControllerService, controller_pb2_grpc.ControllerStub]]:
    service = ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
    }))
    info = await service.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            yield service, controller_pb2_grpc.ControllerStub(channel)
    finally:
        await service.stop()


def _register() -> controller_pb2.RegisterRequest:
    return controller_pb2.RegisterRequest(
        pod=common_pb2.Pod(pod_ip=POD_IP, node_name="node-1", node_manager_address=f"{POD_IP}:50061",
                           endpoint_ids=[0, 1]),
        instance_id=INSTANCE, role=common_pb2.ROLE_UNION, model="motor-sim", dp_size=2,
        endpoints=[common_pb2.Endpoint(id=r, ip=POD_IP, business_port=18000 + r) for r in (0, 1)])


async def test_watch_says_when_each_state_came_about(controller) -> None:
    service, stub = controller
    assert (await stub.Register(_register(), timeout=5)).accepted
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
