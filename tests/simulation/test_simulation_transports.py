"""The in-memory NodeManager transport ends calls the way gRPC does: a client that cancels its call
cancels the handler, and a handler cancelled by its own NodeManager going away (a crash) reaches
the client as UNAVAILABLE, never as a cancellation of the client's own task."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from motor.controller.clients import PeerCallError
from motor.simulation.network import Network, NetworkBounds
from motor.simulation.transports import SimNodeManagerClient

ADDRESS = "10.0.0.2:50051"


class _Engines:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.handler_cancelled = False
        self.crash = asyncio.get_running_loop().create_future()

    async def stop_engines(self, **_: object) -> list[int]:
        self.started.set()
        try:
            return await self.crash  # the NodeManager's crash cancels what its handler awaits
        except asyncio.CancelledError:
            self.handler_cancelled = True
            raise


class _Pod:
    def __init__(self) -> None:
        self.engines = _Engines()


def _client(pod: _Pod) -> SimNodeManagerClient:
    return SimNodeManagerClient(Network(random.Random(0), NetworkBounds(delay_max_sec=0.001)), {ADDRESS: pod},
                                ADDRESS, timeout_sec=5.0)


async def test_a_handler_cancelled_by_its_nodemanager_crashing_fails_the_call_unavailable() -> None:
    pod = _Pod()
    call = asyncio.create_task(_client(pod).stop_engines(7, "reconf-a", 5.0))
    await pod.engines.started.wait()
    pod.engines.crash.cancel()
    with pytest.raises(PeerCallError) as failed:
        await call
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE and not call.cancelled()


async def test_a_cancelled_call_cancels_its_handler() -> None:
    pod = _Pod()
    call = asyncio.create_task(_client(pod).stop_engines(7, "reconf-a", 5.0))
    await pod.engines.started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert pod.engines.handler_cancelled
