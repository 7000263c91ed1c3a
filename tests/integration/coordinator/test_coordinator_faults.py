"""Engine failures seen through an in-process Coordinator, on real motor-engine-sim processes.

Each test breaks its own victim engine (a fresh 1-rank group, instance 3, started for it and stopped
by pid after it), so the tests pass alone and in any order. Instance 1 (the healthy 2-rank group A,
shared by the session) serves the same model and takes the retries.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import aiohttp
import pytest
from .coordinator_helpers import (
    ADD,
    MODEL_A,
    CoordinatorFactory,
    Engines,
    chat,
    completion,
    instance_proto,
    instances_view,
    log_lines,
    post_json,
    post_stream,
    victim_client,
)

from gen.motor.v1 import common_pb2
from motor.sim.cluster import SimCluster

pytestmark = pytest.mark.timeout(90)

VICTIM = "3/0"


def retried_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return log_lines(caplog, "failed before the first byte")


async def test_failure_after_the_first_byte_is_not_retried(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Re-inference off (test_coordinator_reinference.py has it on): the stream fails as it is.
    c = await start_coordinator(migration={"enabled": False})
    # Both instances published; the stream goes to the victim (rank 0 ties rotate: 1/0 first, then 3/0).
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A), instance_proto(3, victim, MODEL_A)])
    assert (await post_json(http, c.http_url + "/v1/completions", completion(max_tokens=1))).headers[
        "X-Motor-Endpoint"] == "1/0"
    client = victim_client(victim)
    assert client.entry()["status"] == "healthy"
    injected = asyncio.Event()

    async def on_event(_event) -> None:
        if not injected.is_set():
            injected.set()
            result = await asyncio.to_thread(client.inject, "unhealthy", reason="mid-stream test")
            assert result.status == 200

    reply = await post_stream(http, c.http_url + "/v1/completions", completion(max_tokens=200), on_event=on_event)
    assert reply.status == 200 and reply.headers["X-Motor-Endpoint"] == VICTIM
    assert not reply.done, "the stream was cut by the engine"
    assert isinstance(reply.events[-1], dict) and "error" in reply.events[-1], reply.events[-1]
    assert len(reply.events) < 100
    assert not retried_lines(caplog), "a started stream is never retried"


async def test_engine_503_is_retried_on_another_endpoint(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = victim_client(victim)
    assert client.inject("unhealthy", reason="503 test").status == 200
    for _ in range(200):  # diagnosing first (vLLM's dialect), then unhealthy; 503 in both
        if client.entry()["status"] == "unhealthy":
            break
        await asyncio.sleep(0.05)
    assert client.complete("x").status == 503
    c = await start_coordinator(endpoint_cooldown_sec=0.3)
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A), instance_proto(3, victim, MODEL_A)])
    url = c.http_url
    for round_ in range(3):
        replies = await asyncio.gather(
            *(post_json(http, url + "/v1/completions", completion(f"r{round_}-{i}")) for i in range(3)),
            *(post_stream(http, url + "/v1/chat/completions", chat(f"s{round_}-{i}")) for i in range(3)),
        )
        for reply in replies:
            assert reply.status == 200, reply
            assert reply.headers["X-Motor-Endpoint"] in ("1/0", "1/1")
        assert all(r.done for r in replies[3:])
        await asyncio.sleep(0.35)  # past the cooldown: the victim is tried again
    lines = retried_lines(caplog)
    assert lines and all("instance=3 rank=0" in line and "engine answered 503" in line for line in lines), lines


async def test_engine_killed_mid_stream_ends_the_stream_with_an_error_event(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = victim_client(victim)
    assert client.complete("x", max_tokens=1).status == 200
    c = await start_coordinator(migration={"enabled": False})  # re-inference off: the stream fails as it is
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A), instance_proto(3, victim, MODEL_A)])
    assert (await post_json(http, c.http_url + "/v1/completions", completion(max_tokens=1))).headers[
        "X-Motor-Endpoint"] == "1/0"
    killed = asyncio.Event()

    async def on_event(_event) -> None:
        if not killed.is_set():
            killed.set()
            await asyncio.to_thread(victim.ranks[0].proc.kill)

    reply = await post_stream(http, c.http_url + "/v1/completions", completion(max_tokens=200), on_event=on_event)
    assert reply.status == 200 and reply.headers["X-Motor-Endpoint"] == VICTIM
    assert not reply.done
    last = reply.events[-1]
    assert isinstance(last, dict) and "endpoint 3/0 failed mid-stream" in last["error"]["message"], last
    assert not retried_lines(caplog), "a started stream is never retried"


async def test_killed_engine_is_retried_without_client_visible_failure(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    victim.ranks[0].proc.kill()
    c = await start_coordinator(endpoint_cooldown_sec=0.3)
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A), instance_proto(3, victim, MODEL_A)])
    url = c.http_url
    for round_ in range(3):
        replies = await asyncio.gather(
            *(post_json(http, url + "/v1/completions", completion(f"k{round_}-{i}")) for i in range(3)),
            *(post_stream(http, url + "/v1/completions", completion(f"ks{round_}-{i}")) for i in range(3)),
        )
        for reply in replies:
            assert reply.status == 200, reply
            assert reply.headers["X-Motor-Endpoint"] in ("1/0", "1/1")
        assert all(r.done for r in replies[3:])
        await asyncio.sleep(0.35)
    lines = retried_lines(caplog)
    assert lines and all("instance=3 rank=0" in line and "connect error" in line for line in lines), lines
    view = await instances_view(http, url)
    assert all(e["outstanding_requests"] == 0 for i in view["instances"] for e in i["endpoints"])


@pytest.fixture
def hung_endpoint() -> Iterator[tuple[str, int]]:
    """A socket that takes connections (kernel backlog) but never answers: a wedged engine."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.5", 0))
        sock.listen(64)
        yield sock.getsockname()
    finally:
        sock.close()


def hung_instance(address: tuple[str, int]) -> common_pb2.Instance:
    return common_pb2.Instance(id=4, model=MODEL_A, endpoints=[
        common_pb2.Endpoint(id=0, ip=address[0], business_port=address[1])])


async def test_timeout_before_headers_is_retried_and_bounded_by_max_retries(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    hung_endpoint: tuple[str, int], caplog: pytest.LogCaptureFixture,
) -> None:
    views = [instance_proto(1, engines.group_a, MODEL_A), hung_instance(hung_endpoint)]
    c = await start_coordinator(upstream_timeout_sec=1.0, upstream_connect_timeout_sec=0.5)
    await c.refresh(ADD, views)
    started = time.monotonic()
    replies = await asyncio.gather(*(post_json(http, c.http_url + "/v1/completions", completion(f"h{i}"))
                                     for i in range(4)))
    assert [r.status for r in replies] == [200] * 4
    assert {r.headers["X-Motor-Endpoint"] for r in replies} <= {"1/0", "1/1"}
    assert time.monotonic() - started >= 1.0, "the hung endpoint was tried and timed out"
    lines = retried_lines(caplog)
    assert lines and all("instance=4 rank=0" in line and "timeout" in line for line in lines), lines

    strict = await start_coordinator(upstream_timeout_sec=1.0, upstream_connect_timeout_sec=0.5, max_retries=0)
    await strict.refresh(ADD, views)
    first = await post_json(http, strict.http_url + "/v1/completions", completion())
    assert first.status == 200 and first.headers["X-Motor-Endpoint"] == "1/0"
    second = await post_json(http, strict.http_url + "/v1/completions", completion())
    assert second.status == 503 and second.headers["Retry-After"] == "1"
    assert "after 1 attempts" in second.body["error"]["message"] and "endpoint 4/0" in second.body["error"]["message"]


async def test_nothing_can_serve_is_503_with_retry_after(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    victim.ranks[0].proc.kill()
    c = await start_coordinator(retry_after_sec=3, endpoint_cooldown_sec=5)
    await c.refresh(ADD, [instance_proto(3, victim, MODEL_A)])
    first = await post_json(http, c.http_url + "/v1/completions", completion())
    assert first.status == 503 and first.headers["Retry-After"] == "3"
    assert "connect error" in first.body["error"]["message"] and "endpoint 3/0" in first.body["error"]["message"]
    # Cooling down: refused at once, without another connection attempt.
    second = await post_stream(http, c.http_url + "/v1/chat/completions", chat())
    assert second.status == 503 and second.headers["Retry-After"] == "3"
    assert "cooling down" in second.events[0]["error"]["message"]
