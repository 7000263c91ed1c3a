"""Helpers of the Coordinator integration tests (fixtures are in conftest.py): engine layout,
serving views as the Controller publishes them, a gRPC handle on a Coordinator, HTTP/SSE clients.

Engines (all with fault tolerance and fault injection on, 0.02 s per token):
  group_a  2-rank DP group, model "motor-sim",   ranks on 127.0.0.1 and 127.0.0.2 (instance 1)
  group_b  1-rank group,    model "motor-sim-b", on 127.0.0.3                     (instance 2)
  victim   1-rank group,    model "motor-sim",   on 127.0.0.4, a fresh one per fault test
           (the `victim` fixture in conftest.py)
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest
from multidict import CIMultiDict

from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from motor.coordinator.main import CoordinatorService
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster

MODEL_A = "motor-sim"
MODEL_B = "motor-sim-b"
PER_TOKEN_SEC = 0.02
SIM_ARGS = [
    "--enable-fault-tolerance", "--enable-fault-injection", "--per-token-latency-sec", str(PER_TOKEN_SEC),
    "--collective-timeout-sec", "5", "--num-experts", "4",
]

ADD = coordinator_pb2.REFRESH_EVENT_ADD
DEL = coordinator_pb2.REFRESH_EVENT_DEL
SET = coordinator_pb2.REFRESH_EVENT_SET
PAUSE = coordinator_pb2.REFRESH_EVENT_PAUSE
RESUME = coordinator_pb2.REFRESH_EVENT_RESUME


@dataclass
class Engines:
    group_a: SimCluster
    group_b: SimCluster


def instance_proto(instance_id: int, cluster: SimCluster, model: str, ranks: Sequence[int] | None = None,
                   *, headless: Sequence[int] = ()) -> common_pb2.Instance:
    """The serving view of ``cluster`` (optionally only ``ranks``) as the Controller would publish it."""
    msg = common_pb2.Instance(id=instance_id, role=common_pb2.ROLE_UNION, model=model, dp_size=len(cluster.ranks))
    for r in cluster.ranks:
        if ranks is None or r.rank in ranks:
            msg.endpoints.add(id=r.rank, ip=r.host, business_port=r.port or 0, mgmt_port=r.port or 0,
                              headless=r.rank in headless)
    return msg


def bare(instance_id: int, *endpoint_ids: int) -> common_pb2.Instance:
    """An instance named only by ids (DEL identity, PAUSE/RESUME)."""
    msg = common_pb2.Instance(id=instance_id)
    for e in endpoint_ids:
        msg.endpoints.add(id=e)
    return msg


_OWN_KEY = object()


class CoordinatorHandle:
    def __init__(self, service: CoordinatorService, channel: grpc.aio.Channel, key: str | None) -> None:
        self.service = service
        self.channel = channel
        self.stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        self.key = key
        self.http_url = f"http://127.0.0.1:{service.http_port}"
        self.revision = 0

    async def refresh(self, event: int, instances: Sequence[common_pb2.Instance], revision: int | None = None,
                      key: str | None | object = _OWN_KEY) -> coordinator_pb2.RefreshResponse:
        """Refresh with the next revision by default; the handle's key unless one is given."""
        if revision is None:
            revision = self.revision + 1
        use_key = self.key if key is _OWN_KEY else key
        metadata = (("x-motor-key", use_key),) if use_key is not None else None
        resp = await self.stub.Refresh(
            coordinator_pb2.RefreshRequest(event=event, instances=list(instances), revision=revision),
            metadata=metadata, timeout=10,
        )
        self.revision = resp.revision
        return resp

    async def list(self) -> coordinator_pb2.ListInstancesResponse:
        return await self.stub.ListInstances(coordinator_pb2.ListInstancesRequest(), timeout=10)


@dataclass
class Reply:
    status: int
    headers: CIMultiDict[str]
    body: Any


@dataclass
class StreamReply:
    status: int
    headers: CIMultiDict[str]
    events: list[Any]  # parsed data payloads, "[DONE]" kept as the string
    arrivals: list[float]  # monotonic arrival time of each event

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == "[DONE]"

    def text(self) -> str:
        out = []
        for e in self.events:
            if isinstance(e, dict):
                for c in e.get("choices", []):
                    out.append(c.get("text") or c.get("delta", {}).get("content") or "")
        return "".join(out)


async def post_json(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> Reply:
    async with session.post(url, json=body, headers=headers) as resp:
        raw = await resp.read()
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return Reply(resp.status, CIMultiDict(resp.headers), parsed)


async def post_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                      on_event: Callable[[Any], Awaitable[None]] | None = None) -> StreamReply:
    async with session.post(url, json={**body, "stream": True}) as resp:
        if resp.status != 200:
            raw = await resp.read()
            return StreamReply(resp.status, CIMultiDict(resp.headers), [json.loads(raw)], [time.monotonic()])
        events: list[Any] = []
        arrivals: list[float] = []
        async for line in resp.content:
            text = line.decode("utf-8").strip()
            if not text.startswith("data: "):
                continue
            payload = text[len("data: "):]
            event = payload if payload == "[DONE]" else json.loads(payload)
            events.append(event)
            arrivals.append(time.monotonic())
            if on_event is not None:
                await on_event(event)
        return StreamReply(resp.status, CIMultiDict(resp.headers), events, arrivals)


def completion(prompt: str = "hello", max_tokens: int = 6, model: str | None = MODEL_A, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, **extra}
    if model is not None:
        body["model"] = model
    return body


def chat(content: str = "hello", max_tokens: int = 6, model: str | None = MODEL_A, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}
    if model is not None:
        body["model"] = model
    return body


async def instances_view(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """The Coordinator's /coordinator/instances page at ``url``."""
    async with session.get(url + "/coordinator/instances") as resp:
        return await resp.json()


def log_lines(caplog: pytest.LogCaptureFixture, containing: str) -> list[str]:
    """The captured log messages that contain ``containing``."""
    return [r.getMessage() for r in caplog.records if containing in r.getMessage()]


CoordinatorFactory = Callable[..., Awaitable[CoordinatorHandle]]


def victim_client(victim: SimCluster) -> SimClient:
    """A client of the `victim` group's only rank."""
    return SimClient(victim.ranks[0].url, timeout_sec=5)
