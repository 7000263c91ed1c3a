"""The Coordinator's /metrics over real engines: requests by outcome and code, retries and upstream
failures, holding, and the routing table read at scrape time; every family parses."""

from __future__ import annotations

import asyncio

import aiohttp
from .coordinator_helpers import (
    ADD,
    MODEL_A,
    CoordinatorFactory,
    Engines,
    chat,
    completion,
    instance_proto,
    post_json,
    post_stream,
)
from prometheus_client.parser import text_string_to_metric_families

from gen.motor.v1 import common_pb2
from motor.common.ports import free_port


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, tuple], float]:
    async with http.get(url + "/metrics") as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        text = await resp.text()
    families = list(text_string_to_metric_families(text))
    # The Coordinator's own families, and the calls and bytes every Motor gRPC server counts.
    assert families and all(f.name.startswith(("motor_coordinator_", "motor_grpc_server_")) for f in families)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def get(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_requests_by_outcome_and_code_and_the_table_at_scrape_time(
    engines: Engines, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator()
    before = await scrape(http, c.http_url)
    assert get(before, "motor_coordinator_revision") == 0
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    replies = [await post_json(http, c.http_url + "/v1/completions", completion(f"m{i}")) for i in range(3)]
    stream = await post_stream(http, c.http_url + "/v1/chat/completions", chat())
    unknown = await post_json(http, c.http_url + "/v1/completions", completion(model="no-such-model"))
    async with http.post(c.http_url + "/v1/completions", data=b"[1, 2]") as resp:
        bad = resp.status
    assert [r.status for r in replies] == [200] * 3 and stream.done and unknown.status == 404 and bad == 400

    after = await scrape(http, c.http_url)
    assert get(after, "motor_coordinator_requests_total", path="/v1/completions", outcome="served", code="200") == 3
    assert get(after, "motor_coordinator_requests_total", path="/v1/chat/completions", outcome="served",
               code="200") == 1
    assert get(after, "motor_coordinator_requests_total", path="/v1/completions", outcome="unknown_model",
               code="404") == 1
    assert get(after, "motor_coordinator_requests_total", path="/v1/completions", outcome="bad_request",
               code="400") == 1
    assert get(after, "motor_coordinator_request_seconds_count", path="/v1/completions", outcome="served") == 3
    assert get(after, "motor_coordinator_retries_total") == 0
    assert get(after, "motor_coordinator_published_endpoints", instance_id="1") == 2
    assert get(after, "motor_coordinator_routable_endpoints", instance_id="1") == 2
    assert get(after, "motor_coordinator_instance_paused", instance_id="1") == 0
    assert get(after, "motor_coordinator_in_flight_requests", instance_id="1", rank="0") == 0
    assert get(after, "motor_coordinator_in_flight") == 0
    assert get(after, "motor_coordinator_revision") == c.revision


async def test_a_failure_before_the_first_byte_is_one_retry_and_one_upstream_failure(
    engines: Engines, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(endpoint_cooldown_sec=30)
    # Instance 0 (tried first: lowest id on a tie) points at a port nobody listens on.
    dead = common_pb2.Instance(id=0, role=common_pb2.ROLE_UNION, model=MODEL_A, dp_size=1)
    dead.endpoints.add(id=0, ip="127.0.0.1", business_port=free_port("127.0.0.1"))
    await c.refresh(ADD, [dead, instance_proto(1, engines.group_a, MODEL_A)])
    reply = await post_json(http, c.http_url + "/v1/completions", completion())
    assert reply.status == 200 and reply.headers["X-Motor-Endpoint"].startswith("1/")
    samples = await scrape(http, c.http_url)
    assert get(samples, "motor_coordinator_retries_total") == 1
    assert get(samples, "motor_coordinator_upstream_failures_total", instance_id="0") == 1
    assert get(samples, "motor_coordinator_requests_total", path="/v1/completions", outcome="served", code="200") == 1
    # Cooling down: published but not routable.
    assert get(samples, "motor_coordinator_published_endpoints", instance_id="0") == 1
    assert get(samples, "motor_coordinator_routable_endpoints", instance_id="0") == 0


async def test_a_request_held_until_something_is_published(
    engines: Engines, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession,
) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=60.0)
    pending = asyncio.create_task(post_json(http, c.http_url + "/v1/completions", completion()))
    for _ in range(600):  # until the request is seen holding (bounded: 30 s)
        if get(await scrape(http, c.http_url), "motor_coordinator_holding_requests") == 1:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the request was never seen holding")
    await c.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    reply = await pending
    assert reply.status == 200
    samples = await scrape(http, c.http_url)
    assert get(samples, "motor_coordinator_holding_requests") == 0
    assert get(samples, "motor_coordinator_held_requests_total") == 1
    assert get(samples, "motor_coordinator_hold_seconds_count") == 1
    assert get(samples, "motor_coordinator_hold_seconds_sum") > 0
    assert get(samples, "motor_coordinator_requests_total", path="/v1/completions", outcome="served", code="200") == 1
