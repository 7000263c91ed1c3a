"""The Coordinator's start-up sync with the Controller leader over a fake client: it retries while no
replica leads (capped, doubling waits), stops at the first SET from anyone, and closes promptly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from gen.motor.v1 import controller_pb2
from motor.common.leader_client import LeaderUnavailable
from motor.coordinator.controller_sync import ControllerSync
from motor.coordinator.routing import RoutingTable
from motor.coordinator.serving_view import RefreshEvent

pytestmark = pytest.mark.timeout(30)


class FakeLeaderClient:
    """Answers each call with the next of ``answers``: an exception to raise, a callable to run, or a response."""

    def __init__(self, *answers: Any) -> None:
        self.address = "127.0.0.1:1"
        self.answers = list(answers)
        self.calls: list[float] = []
        self.closed = False

    async def call(self, method: str, request: Any) -> Any:
        assert method == "RequestPublication"
        self.calls.append(time.monotonic())
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return await answer()
        return answer

    async def close(self) -> None:
        self.closed = True


class Unavailable(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "no route")


async def test_retries_with_doubling_waits_until_the_leader_answers() -> None:
    client = FakeLeaderClient(LeaderUnavailable("election under way"), Unavailable(),
                              controller_pb2.RequestPublicationResponse(term=3, instance_ids=[1]))
    sync = ControllerSync(client, RoutingTable())  # type: ignore[arg-type]
    sync.start()
    await asyncio.wait_for(sync.synced.wait(), 10)
    assert sync.attempts == 3
    waits = [b - a for a, b in zip(client.calls, client.calls[1:])]
    assert waits[0] >= 0.2 and waits[1] >= 0.4 and waits[1] > waits[0]
    await sync.close()
    assert client.closed


async def test_a_set_from_anyone_ends_it_without_another_call() -> None:
    table = RoutingTable()
    client = FakeLeaderClient(LeaderUnavailable("no leader"))
    sync = ControllerSync(client, table)  # type: ignore[arg-type]
    sync.start()
    while not client.calls:
        await asyncio.sleep(0.01)
    table.refresh(RefreshEvent.SET, [], 1)  # arrives during the backoff
    await asyncio.wait_for(sync.synced.wait(), 10)
    assert sync.attempts == 1 and len(client.calls) == 1
    await sync.close()


async def test_close_cancels_a_call_in_flight() -> None:
    async def never() -> None:
        await asyncio.Event().wait()

    client = FakeLeaderClient(never)
    sync = ControllerSync(client, RoutingTable())  # type: ignore[arg-type]
    sync.start()
    while not client.calls:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(sync.close(), 2)
    assert not sync.synced.is_set() and client.closed
