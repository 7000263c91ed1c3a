"""Re-inference through an in-process Coordinator on real motor-engine-sim processes: a request whose
engine faults mid-flight continues on another endpoint, and the client's answer is exactly the
uninterrupted one (the reference engine's next token depends only on the preceding text, like
greedy decoding).

The request starts on a fresh 1-rank victim (instance 3, the only one published); at its first event
the healthy 2-rank group A is published too (instance 1) and the victim is broken (unhealthy, process
killed, or withdrawn from the view), so the continuation can only go to group A.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from .coordinator_helpers import (
    ADD,
    DEL,
    MODEL_A,
    CoordinatorFactory,
    CoordinatorHandle,
    Engines,
    StreamReply,
    chat,
    completion,
    instance_proto,
    post_json,
    post_stream,
    victim_client,
)

from gen.motor.v1 import coordinator_pb2
from motor.sim.cluster import SimCluster
from motor.sim.toy_model import decode, expected_chat_completion, expected_completion

pytestmark = pytest.mark.timeout(120)

TOKENS = 60  # 1.2 s at 0.02 s per token: the fault lands mid-stream


Breaker = Callable[[], Awaitable[None]]


def breakers(c: CoordinatorHandle, engines: Engines, victim: SimCluster) -> dict[str, Breaker]:
    client = victim_client(victim)

    async def unhealthy() -> None:
        assert (await asyncio.to_thread(client.inject, "unhealthy", reason="re-inference test")).status == 200

    async def executor_death() -> None:
        assert (await asyncio.to_thread(client.inject, "executor_death")).status == 200

    async def kill() -> None:
        await asyncio.to_thread(victim.ranks[0].proc.kill)

    async def withdrawn() -> None:  # a wedged engine (stopped, connection open) that the Controller withdraws
        os.kill(victim.ranks[0].proc.pid, signal.SIGSTOP)
        await c.refresh(DEL, [instance_proto(3, victim, MODEL_A)])

    return {"unhealthy": unhealthy, "executor_death": executor_death, "kill": kill, "withdrawn": withdrawn}


async def stream_with_fault(c: CoordinatorHandle, engines: Engines, victim: SimCluster, http: aiohttp.ClientSession,
                            path: str, body: dict[str, Any], fault: str, after_events: int = 3) -> StreamReply:
    await c.refresh(ADD, [instance_proto(3, victim, MODEL_A)])
    breaker = breakers(c, engines, victim)[fault]
    seen = 0

    async def on_event(_event: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == after_events:
            await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
            await breaker()

    return await post_stream(http, c.http_url + path, body, on_event=on_event)


def migration_marker(reply: StreamReply) -> dict[str, Any]:
    markers = [e["motor_migration"] for e in reply.events if isinstance(e, dict) and "motor_migration" in e]
    assert len(markers) == 1, reply.events[-3:]
    return markers[0]


def reinference(listed: coordinator_pb2.ListInstancesResponse) -> dict[int, tuple[int, int]]:
    return {r.instance_id: (r.migrated_requests, r.failed_requests) for r in listed.reinference}


@pytest.mark.parametrize("fault", ["unhealthy", "executor_death", "kill", "withdrawn"])
async def test_stream_continues_elsewhere_with_exactly_the_uninterrupted_text(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
    fault: str,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=10.0, migration={"withdrawn_stall_sec": 0.3})
    prompt = f"re-inference after {fault}"
    reply = await stream_with_fault(c, engines, victim, http, "/v1/completions",
                                    completion(prompt, max_tokens=TOKENS, stream_options={"include_usage": True}),
                                    fault)
    assert reply.status == 200 and reply.done, reply.events[-3:]
    assert reply.headers["X-Motor-Endpoint"] == "3/0", "headers are the first engine's"
    assert reply.text() == expected_completion(prompt, TOKENS)
    data = [e for e in reply.events if isinstance(e, dict)]
    assert not any("error" in e for e in data)
    assert len({e["id"] for e in data}) == 1, "one completion id for the whole stream"
    assert not any("token_ids" in ch or "prompt_token_ids" in ch for e in data for ch in e["choices"]), \
        "token ids the Coordinator asked for are not shown to the client"
    assert {e["motor_dp_rank"] for e in data if e["choices"]} >= {0}
    marker = migration_marker(reply)
    assert marker["migrations"] == 1 and marker["endpoints"][0] == "3/0" and marker["endpoints"][1] in ("1/0", "1/1")
    usage = next(e["usage"] for e in data if e.get("usage"))
    assert usage["completion_tokens"] == TOKENS and usage["prompt_tokens"] == len(prompt.split())
    assert reinference(await c.list())[3] == (1, 0)
    metrics = (await (await http.get(c.http_url + "/metrics")).read()).decode()
    assert 'motor_coordinator_migrated_requests_total{outcome="completed",path="/v1/completions"} 1.0' in metrics
    assert 'motor_coordinator_migrations_total{instance_id="3"' in metrics


async def test_chat_stream_continues_the_assistant_message(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=10.0)
    body = chat("tell me about experts", max_tokens=TOKENS)
    reply = await stream_with_fault(c, engines, victim, http, "/v1/chat/completions", body, "executor_death",
                                    after_events=5)
    assert reply.status == 200 and reply.done
    assert reply.text() == expected_chat_completion(body["messages"], TOKENS)
    roles = [e for e in reply.events if isinstance(e, dict) for ch in e["choices"] if "role" in ch.get("delta", {})]
    assert len(roles) == 1
    assert migration_marker(reply)["migrations"] == 1


async def test_token_id_prompt_is_continued_with_token_ids(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=10.0, migration={"carry_token_ids": False})
    prompt_ids = [3, 4, 5, 60, 61]  # words and two raw bytes
    body = {"model": MODEL_A, "prompt": prompt_ids, "max_tokens": TOKENS, "return_token_ids": True}
    reply = await stream_with_fault(c, engines, victim, http, "/v1/completions", body, "unhealthy")
    assert reply.status == 200 and reply.done
    assert reply.text() == expected_completion(decode(prompt_ids), TOKENS)
    data = [e for e in reply.events if isinstance(e, dict) and e["choices"]]
    assert data[0]["choices"][0]["prompt_token_ids"] == prompt_ids, "the client asked for ids: it gets them"
    assert sum("prompt_token_ids" in e["choices"][0] for e in data) == 1, "once, not again after the migration"
    assert sum(len(e["choices"][0]["token_ids"]) for e in data) == TOKENS


async def test_non_streamed_request_is_sent_again_after_its_engine_died(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=10.0)
    await c.refresh(ADD, [instance_proto(3, victim, MODEL_A)])
    client = victim_client(victim)

    async def break_when_running() -> None:
        for _ in range(500):
            if (await asyncio.to_thread(client.request, "GET", "/motor/admin/state")).body["in_flight_requests"]:
                break
            await asyncio.sleep(0.01)
        await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
        assert (await asyncio.to_thread(client.inject, "executor_death")).status == 200

    prompt = "non-streamed re-inference"
    reply, _ = await asyncio.gather(
        post_json(http, c.http_url + "/v1/completions", completion(prompt, max_tokens=TOKENS),
                  headers={"X-Request-Id": "req-42"}),
        break_when_running())
    assert reply.status == 200, reply.body
    assert reply.body["choices"][0]["text"] == expected_completion(prompt, TOKENS)
    assert reply.headers["X-Motor-Migrated"] == "1" and reply.headers["X-Motor-Migrated-From"] == "3/0"
    assert reply.headers["X-Request-Id"] == "req-42" and reply.headers["X-Motor-Endpoint"] in ("1/0", "1/1")
    assert reinference(await c.list())[3] == (1, 0)


async def test_held_after_the_fault_then_a_clear_error_when_nothing_serves(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=0.5)
    await c.refresh(ADD, [instance_proto(3, victim, MODEL_A)])
    client = victim_client(victim)
    seen = 0

    async def on_event(_event: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == 2:
            assert (await asyncio.to_thread(client.inject, "executor_death")).status == 200

    reply = await post_stream(http, c.http_url + "/v1/completions", completion("alone", max_tokens=TOKENS),
                              on_event=on_event)
    assert reply.status == 200 and not reply.done
    last = reply.events[-1]
    assert isinstance(last, dict) and "could not be continued after its engine failed" in last["error"]["message"]
    assert "3/0" in last["error"]["message"], last
    assert reinference(await c.list())[3] == (1, 1)
    metrics = (await (await http.get(c.http_url + "/metrics")).read()).decode()
    assert 'motor_coordinator_migrated_requests_total{outcome="failed",path="/v1/completions"} 1.0' in metrics


async def test_migration_limit_and_off_switch(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    off = await start_coordinator(hold_when_unavailable_sec=10.0, migration={"enabled": False})
    reply = await stream_with_fault(off, engines, victim, http, "/v1/completions",
                                    completion("no migration", max_tokens=TOKENS), "unhealthy")
    assert reply.status == 200 and not reply.done
    assert "error" in reply.events[-1] and not any("motor_migration" in e for e in reply.events if isinstance(e, dict))
    assert not (await off.list()).reinference


async def test_canary_goes_to_the_first_published_endpoint_and_reports_the_engine(
    engines: Engines, victim: SimCluster, start_coordinator: CoordinatorFactory,
) -> None:
    c = await start_coordinator()
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A, ranks=[1])])
    answer = await c.stub.SendCanary(coordinator_pb2.SendCanaryRequest(
        instance_id=1, endpoint_ids=[0, 1], timeout_sec=5, request_id="probe-1"), timeout=10)
    assert (answer.endpoint_id, answer.served, answer.http_status, answer.request_id) == (1, True, 200, "probe-1")
    for request, code in [
        (coordinator_pb2.SendCanaryRequest(instance_id=9, endpoint_ids=[0], timeout_sec=1), "NOT_FOUND"),
        (coordinator_pb2.SendCanaryRequest(instance_id=1, endpoint_ids=[0], timeout_sec=1), "FAILED_PRECONDITION"),
        (coordinator_pb2.SendCanaryRequest(instance_id=1, endpoint_ids=[1], timeout_sec=0), "INVALID_ARGUMENT"),
        (coordinator_pb2.SendCanaryRequest(instance_id=1, endpoint_ids=[], timeout_sec=1), "INVALID_ARGUMENT"),
    ]:
        with pytest.raises(Exception) as info:
            await c.stub.SendCanary(request, timeout=10)
        assert info.value.code().name == code, info.value  # type: ignore[attr-defined]
    # A faulted engine answers the canary with its error.
    await c.refresh(ADD, [instance_proto(3, victim, MODEL_A)])
    client = victim_client(victim)
    assert client.inject("unhealthy", reason="canary test").status == 200
    answer = await c.stub.SendCanary(coordinator_pb2.SendCanaryRequest(
        instance_id=3, endpoint_ids=[0], timeout_sec=5), timeout=10)
    assert not answer.served and answer.http_status == 503 and answer.request_id.startswith("canary-")
    assert json.dumps(answer.detail)
