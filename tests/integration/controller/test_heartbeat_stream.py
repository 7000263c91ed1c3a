"""Heartbeats on one HeartbeatStream call, against a real Controller on port 0: every heartbeat is a
message of the same stream and is recorded as a Heartbeat call would be; a stream without a bounded
deadline is refused naming it; a Controller without the stream (an older one), a replica that never
answers and a lone silent replica each get the unary path or a clear failure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.controller.main import ControllerService
from motor.testing.fake_controller import FakeController
from motor.testing.waits import async_wait_for
from nodemanager.controller_client import ControllerClient
from nodemanager.controller_link import ControllerLink

from .controller_support import controller_service, register_request

pytestmark = pytest.mark.timeout(60)

POD_IP = "127.0.0.2"
INSTANCE = 3


@pytest.fixture
async def controller() -> AsyncIterator[tuple[ControllerService, str]]:
    service = controller_service()
    info = await service.start()
    try:
        yield service, f"127.0.0.1:{info['grpc_port']}"
    finally:
        await service.stop()


def _register() -> controller_pb2.RegisterRequest:
    return register_request(POD_IP, INSTANCE)


def _beat(seq: int) -> controller_pb2.HeartbeatRequest:
    return controller_pb2.HeartbeatRequest(pod_ip=POD_IP, instance_id=INSTANCE, alive_endpoint_ids=[0, 1], seq=seq)


def _metric(service: ControllerService, name: str, labels: dict[str, str]) -> float:
    assert service.core is not None
    return service.core.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_heartbeats_are_messages_of_one_stream_and_recorded_as_heartbeats(controller) -> None:
    service, address = controller
    client = ControllerClient(address, timeout_sec=5.0)
    try:
        assert (await client.register(_register())).accepted
        seen_before = service.core.registry.get(INSTANCE).pods[POD_IP].last_heartbeat_sec
        for seq in range(1, 11):
            resp = await client.heartbeat(_beat(seq))
            assert resp.known and resp.config.heartbeat_interval_sec > 0
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (1, 0)
        assert service.core.registry.get(INSTANCE).pods[POD_IP].last_heartbeat_sec > seen_before
        counted = {d: _metric(service, "motor_grpc_server_stream_messages_total",
                              {"method": "HeartbeatStream", "direction": d}) for d in ("received", "sent")}
        assert counted == {"received": 10, "sent": 10}
        assert _metric(service, "motor_grpc_server_calls_total", {"method": "Heartbeat"}) == 0
        # A pod the Controller does not know is answered on the stream too: known=false.
        other = controller_pb2.HeartbeatRequest(pod_ip=POD_IP, instance_id=INSTANCE + 1, alive_endpoint_ids=[0], seq=11)
        assert not (await client.heartbeat(other)).known
        assert client.heartbeats.streams_opened == 1
    finally:
        await client.close()


async def test_the_quiet_interval_travels_to_the_nodemanager_and_spaces_its_unchanged_heartbeats() -> None:
    service = controller_service(heartbeat_interval_sec=0.1, heartbeat_timeout_sec=0.9)
    info = await service.start()
    client = ControllerClient(f"127.0.0.1:{info['grpc_port']}", timeout_sec=5.0)
    link = ControllerLink(client, instance_id=INSTANCE, pod_ip=POD_IP, build_register=_register,
                          alive_ids=lambda: [0, 1], on_config=lambda cfg, source: None,
                          heartbeat_interval_sec=1.0, max_backoff_sec=0.2)
    launched = asyncio.Event()
    launched.set()
    task = asyncio.create_task(link.run(launched))
    received = {"method": "HeartbeatStream", "direction": "received"}
    try:
        await async_wait_for(lambda: _metric(service, "motor_grpc_server_stream_messages_total", received) >= 4,
                             20.0, "four heartbeats", interval_sec=0.02)
        # The Controller's period and a third of its timeout, handed down at registration.
        assert (link.heartbeat_interval_sec, link.quiet_interval_sec) == (0.1, pytest.approx(0.3))
        seen = service.core.registry.get(INSTANCE).pods[POD_IP].last_heartbeat_sec
        await async_wait_for(lambda: service.core.registry.get(INSTANCE).pods[POD_IP].last_heartbeat_sec > seen,
                             20.0, "the next heartbeat", interval_sec=0.01)
        gap_sec = service.core.registry.get(INSTANCE).pods[POD_IP].last_heartbeat_sec - seen
        assert gap_sec >= 0.3 - 0.05, f"an unchanged pod heartbeated {gap_sec:.3f}s after the last, inside 0.3s"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
        await service.stop()


@pytest.mark.parametrize("deadline_sec, says", [(None, "it has none"), (7200.0, "it has 72")])
async def test_a_stream_without_a_bounded_deadline_is_refused_naming_it(controller, deadline_sec, says) -> None:
    _, address = controller
    async with open_channel(address) as channel:
        call = controller_pb2_grpc.ControllerStub(channel).HeartbeatStream(timeout=deadline_sec)
        try:
            await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=_beat(1)))
            await call.read()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the refusal may come before the write or the read
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "at most 3600 s" in await call.details() and says in await call.details()


async def test_an_older_controller_without_the_stream_gets_unary_heartbeats() -> None:
    fake = FakeController()
    address = fake.start()
    client = ControllerClient(address, timeout_sec=5.0)
    try:
        await client.register(_register())
        # The stream is asked for until the answer is UNIMPLEMENTED: a first write that races the
        # refusal ends INTERNAL on the client ("Failed execute_batch"), the refusal unseen, and the
        # next heartbeat asks again. Every one of them goes unary meanwhile.
        seq = 0
        for seq in range(1, 6):
            opened = client.heartbeats.streams_opened
            assert (await client.heartbeat(_beat(seq))).known
            if client.heartbeats.streams_opened == opened:
                break
        assert seq >= 2, "the first heartbeat never asked for the stream"
        opened = client.heartbeats.streams_opened
        assert opened < seq, f"the stream was asked for at every heartbeat ({opened} of {seq})"
        # Then not again for a while: every heartbeat went unary.
        for seq in range(seq + 1, seq + 4):
            assert (await client.heartbeat(_beat(seq))).known
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (opened, seq)
        assert [r.seq for r in fake.heartbeats] == list(range(1, seq + 1))
    finally:
        await client.close()
        fake.stop()


class _Silent:
    """A server that accepts HeartbeatStream calls and never answers them, and Heartbeat calls, which
    it answers only when `answer_unary`."""

    def __init__(self, answer_unary: bool = False) -> None:
        self.server = grpc.aio.server()
        self.streams = 0
        self.heard = asyncio.Event()  # a heartbeat came on a stream
        self.answer_unary = answer_unary

    async def _stream(self, requests, context):  # noqa: ANN001
        self.streams += 1
        async for _ in requests:
            self.heard.set()
        yield controller_pb2.HeartbeatStreamResponse()

    async def _unary(self, request, context):  # noqa: ANN001
        if not self.answer_unary:
            await asyncio.Event().wait()
        return controller_pb2.HeartbeatResponse(known=True)

    async def start(self) -> str:
        handlers = {
            "HeartbeatStream": grpc.stream_stream_rpc_method_handler(
                self._stream, controller_pb2.HeartbeatStreamRequest.FromString,
                controller_pb2.HeartbeatStreamResponse.SerializeToString),
            "Heartbeat": grpc.unary_unary_rpc_method_handler(
                self._unary, controller_pb2.HeartbeatRequest.FromString,
                controller_pb2.HeartbeatResponse.SerializeToString),
        }
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("motor.v1.Controller", handlers),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"


async def test_a_silent_replica_is_left_for_the_next_one_and_a_lone_one_fails_naming_it(controller) -> None:
    _, address = controller
    silent = _Silent()
    silent_address = await silent.start()
    client = ControllerClient([silent_address, address], timeout_sec=0.5)
    lone = ControllerClient(silent_address, timeout_sec=0.5)
    registrar = ControllerClient(address, timeout_sec=5.0)
    try:
        await registrar.register(_register())
        # The stream to the silent replica gets no answer: the heartbeat goes unary to the other one,
        # and the next one opens its stream there.
        assert (await client.heartbeat(_beat(1))).known
        assert client.address == address and client.heartbeats.unary_fallbacks == 1
        assert (await client.heartbeat(_beat(2))).known
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (2, 1)
        with pytest.raises(TimeoutError, match=f"HeartbeatStream to {silent_address}: no answer within 0.5s"):
            await lone.heartbeat(_beat(1))
        assert silent.streams == 2
    finally:
        await client.close()
        await lone.close()
        await registrar.close()
        await silent.server.stop(grace=None)


async def test_a_stopping_controller_ends_its_heartbeat_streams_instead_of_waiting_out_its_grace() -> None:
    service = controller_service(shutdown_grace_sec=300)
    info = await service.start()
    stopped = False
    try:
        async with open_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            call = controller_pb2_grpc.ControllerStub(channel).HeartbeatStream(timeout=600)
            await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=_beat(1)))
            assert not (await call.read()).heartbeat.known
            stopping = asyncio.create_task(service.stop())
            with pytest.raises(grpc.aio.AioRpcError) as info_err:
                await call.read()
            assert info_err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "is stopping" in info_err.value.details()
            await stopping  # the grace of 300 s was left to calls in flight: there were none
            stopped = True
    finally:
        if not stopped:
            await service.stop()


async def test_a_stream_answering_when_the_controller_stops_ends_once_its_answer_is_sent(monkeypatch) -> None:
    # The stop starts as the Controller hands an answer to grpc to send: the answer still arrives,
    # then the stream's end (the refusal a status sent during that send would meet is in
    # tests/unit/controller/test_heartbeat_streams.py: here the send may finish first).
    service = controller_service(shutdown_grace_sec=300)
    info = await service.start()
    assert service.core is not None
    answer = service.core.heartbeat
    stopping: list[asyncio.Task] = []

    def answer_then_stop(request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        if request.seq == 2:  # runs as soon as the handler yields this answer to grpc to send
            stopping.append(asyncio.create_task(service.stop()))
        return answer(request)

    monkeypatch.setattr(service.core, "heartbeat", answer_then_stop)
    try:
        async with open_channel(f"127.0.0.1:{info['grpc_port']}") as channel:
            call = controller_pb2_grpc.ControllerStub(channel).HeartbeatStream(timeout=600)
            for seq in (1, 2):
                await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=_beat(seq)))
                assert (await call.read()).HasField("heartbeat")
            with pytest.raises(grpc.aio.AioRpcError) as info_err:
                await call.read()
            assert info_err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "is stopping" in info_err.value.details()
            await stopping[0]
    finally:
        if not stopping:
            await service.stop()


async def test_a_stream_cancelled_under_a_heartbeat_is_a_lost_stream_not_a_cancelled_heartbeat() -> None:
    # What closing the channel does to the stream (rotated certificate files reopen it while a
    # heartbeat waits for its answer): grpc raises CancelledError in the read, though nobody
    # cancelled the heartbeat. It goes unary instead of ending the NodeManager's heartbeat loop.
    silent = _Silent(answer_unary=True)
    address = await silent.start()
    client = ControllerClient(address, timeout_sec=30.0)
    try:
        beat = asyncio.create_task(client.heartbeat(_beat(1)))
        await silent.heard.wait()
        client.heartbeats._call.cancel()  # as the channel's close cancels each of its calls
        assert (await beat).known
        assert (client.heartbeats.streams_opened, client.heartbeats.unary_fallbacks) == (1, 1)
    finally:
        await client.close()
        await silent.server.stop(grace=None)
