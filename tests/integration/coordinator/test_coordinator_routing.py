"""An in-process Coordinator (gRPC + HTTP on port 0) in front of real motor-engine-sim processes:
publication through gRPC, routing and spreading, streaming pass-through, DEL identity, revisions,
PAUSE/RESUME, draining, client disconnects, and the management key."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import grpc
import pytest

from gen.motor.v1 import common_pb2, coordinator_pb2
from motor.sim.client import SimClient
from motor.testing.waits import async_wait_for

from .coordinator_helpers import (
    ADD,
    DEL,
    MODEL_A,
    MODEL_B,
    PAUSE,
    PER_TOKEN_SEC,
    RESUME,
    SET,
    CoordinatorFactory,
    CoordinatorHandle,
    Engines,
    bare,
    chat,
    completion,
    instance_proto,
    instances_view,
    log_lines,
    post_json,
    post_stream,
)

pytestmark = pytest.mark.timeout(90)


async def endpoint_of(session: aiohttp.ClientSession, c: CoordinatorHandle, body: dict) -> str:
    reply = await post_json(session, c.http_url + "/v1/completions", body)
    assert reply.status == 200, reply.body
    return reply.headers["X-Motor-Endpoint"]


def assert_unavailable(reply, retry_after: str = "1") -> None:
    assert reply.status == 503, reply.body
    assert reply.headers["Retry-After"] == retry_after
    error = reply.body["error"]
    assert error["message"] and error["type"] and error["code"]


async def test_publish_list_and_models(engines: Engines, coordinator: CoordinatorHandle,
                                       http: aiohttp.ClientSession) -> None:
    a = instance_proto(1, engines.group_a, MODEL_A)
    b = instance_proto(2, engines.group_b, MODEL_B)
    assert (await coordinator.refresh(ADD, [a, b], revision=3)).revision == 3
    listed = await coordinator.list()
    assert listed.revision == 3
    assert [p.instance for p in listed.instances] == [a, b], "ListInstances echoes the published views"
    assert [p.paused for p in listed.instances] == [False, False]
    assert dict(listed.instances[0].outstanding_requests) == {0: 0, 1: 0}

    async with http.get(coordinator.http_url + "/v1/models") as resp:
        models = await resp.json()
    assert resp.status == 200 and models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL_A, MODEL_B]
    async with http.get(coordinator.http_url + f"/v1/models/{MODEL_B}") as resp:
        assert resp.status == 200 and (await resp.json())["id"] == MODEL_B
    async with http.get(coordinator.http_url + "/v1/models/absent") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "model_not_found"
    view = await instances_view(http, coordinator.http_url)
    assert view["revision"] == 3
    assert [(i["id"], i["model"], i["paused"]) for i in view["instances"]] == [(1, MODEL_A, False), (2, MODEL_B, False)]
    assert [(e["id"], e["ip"], e["outstanding_requests"]) for e in view["instances"][0]["endpoints"]] == [
        (0, "127.0.0.1", 0), (1, "127.0.0.2", 0)]
    async with http.get(coordinator.http_url + "/health") as resp:
        assert resp.status == 200


async def test_concurrent_requests_spread_over_the_ranks(engines: Engines, coordinator: CoordinatorHandle,
                                                         http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    url = coordinator.http_url
    replies = await asyncio.gather(
        *(post_json(http, url + "/v1/completions", completion(f"p{i}", max_tokens=10)) for i in range(4)),
        *(post_json(http, url + "/v1/chat/completions", chat(f"c{i}", max_tokens=10)) for i in range(4)),
    )
    served = []
    for reply in replies:
        assert reply.status == 200, reply.body
        endpoint = reply.headers["X-Motor-Endpoint"]
        assert endpoint == f"1/{reply.body['motor_dp_rank']}", "the header names the rank that served"
        assert reply.headers["X-Motor-DP-Rank"] == str(reply.body["motor_dp_rank"]), "engine headers pass through"
        assert reply.headers["X-Request-Id"]
        served.append(endpoint)
    assert sorted(served) == ["1/0"] * 4 + ["1/1"] * 4, "least outstanding: 8 concurrent requests split 4/4"
    assert replies[0].body["object"] == "text_completion" and replies[4].body["object"] == "chat.completion"
    listed = await coordinator.list()
    assert dict(listed.instances[0].outstanding_requests) == {0: 0, 1: 0}


async def test_sequential_requests_follow_the_tie_break(engines: Engines, coordinator: CoordinatorHandle,
                                                        http: aiohttp.ClientSession) -> None:
    # Ties go to the lowest original rank, then rotate across instances (no model: any instance).
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A),
                                    instance_proto(2, engines.group_b, MODEL_B)])
    served = [await endpoint_of(http, coordinator, completion(model=None, max_tokens=2)) for _ in range(4)]
    assert served == ["1/0", "2/0", "1/0", "2/0"]


async def test_streaming_is_passed_through_chunk_by_chunk(engines: Engines, coordinator: CoordinatorHandle,
                                                          http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    max_tokens = 25
    for path, body in (("/v1/completions", completion(max_tokens=max_tokens)),
                       ("/v1/chat/completions", chat(max_tokens=max_tokens))):
        reply = await post_stream(http, coordinator.http_url + path, body)
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        assert reply.headers["X-Motor-Endpoint"] in ("1/0", "1/1")
        assert reply.done, reply.events[-3:]
        tokens = [e for e in reply.events if isinstance(e, dict) and e["choices"]
                  and (e["choices"][0].get("text") or e["choices"][0].get("delta", {}).get("content"))]
        assert len(tokens) == max_tokens
        # Unbuffered: the events reach the client spread over the generation time, not in one burst.
        spread = reply.arrivals[-1] - reply.arrivals[0]
        assert spread >= 0.5 * (max_tokens - 1) * PER_TOKEN_SEC, f"events arrived within {spread:.3f}s"
        # Same text as a direct request to the engine (pass-through does not alter the payload).
        rank = int(reply.headers["X-Motor-Endpoint"].split("/")[1])
        direct = SimClient(engines.group_a.ranks[rank].url).complete("hello", max_tokens=max_tokens)
        if path == "/v1/completions":
            assert reply.text() == direct.body["choices"][0]["text"]


async def test_model_routing_and_unknown_model(engines: Engines, coordinator: CoordinatorHandle,
                                               http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A),
                                    instance_proto(2, engines.group_b, MODEL_B)])
    assert {await endpoint_of(http, coordinator, completion(model=MODEL_B)) for _ in range(3)} == {"2/0"}
    assert {await endpoint_of(http, coordinator, completion(model=MODEL_A)) for _ in range(3)} <= {"1/0", "1/1"}
    no_model = {await endpoint_of(http, coordinator, completion(model=None, max_tokens=1)) for _ in range(4)}
    assert "2/0" in no_model and no_model & {"1/0", "1/1"}, "no model field: any instance"

    reply = await post_json(http, coordinator.http_url + "/v1/chat/completions", chat(model="nope"))
    assert reply.status == 404
    assert reply.body["error"]["code"] == "model_not_found" and "nope" in reply.body["error"]["message"]
    assert reply.body["error"]["type"]
    bad = await post_json(http, coordinator.http_url + "/v1/completions", {"model": 7, "prompt": "x"})
    assert bad.status == 400 and "model must be a string" in bad.body["error"]["message"]
    async with http.post(coordinator.http_url + "/v1/completions", data=b"{not json") as resp:
        assert resp.status == 400 and "not valid JSON" in (await resp.json())["error"]["message"]


async def test_engine_errors_other_than_unavailability_pass_through(engines: Engines, coordinator: CoordinatorHandle,
                                                                    http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    reply = await post_json(http, coordinator.http_url + "/v1/completions", completion(max_tokens=0))
    assert reply.status == 400, "the engine's own 400 is returned as is, not retried"
    assert "max_tokens" in reply.body["error"]["message"]
    assert reply.headers["X-Motor-Endpoint"] == "1/0"


async def test_nothing_published_is_503_with_retry_after(start_coordinator: CoordinatorFactory,
                                                        http: aiohttp.ClientSession) -> None:
    c = await start_coordinator(retry_after_sec=7)
    reply = await post_json(http, c.http_url + "/v1/completions", completion(model=None),
                            headers={"X-Request-Id": "req-empty-1"})
    assert_unavailable(reply, retry_after="7")
    assert reply.headers["X-Request-Id"] == "req-empty-1"
    stream = await post_stream(http, c.http_url + "/v1/chat/completions", chat(model=None))
    assert stream.status == 503 and stream.headers["Retry-After"] == "7"
    async with http.get(c.http_url + "/v1/models") as resp:
        assert (await resp.json())["data"] == []


async def test_del_identity_mismatch_is_refused_and_changes_nothing(engines: Engines, coordinator: CoordinatorHandle,
                                                                    http: aiohttp.ClientSession) -> None:
    a = instance_proto(1, engines.group_a, MODEL_A)
    await coordinator.refresh(ADD, [a, instance_proto(2, engines.group_b, MODEL_B)], revision=10)
    before = await coordinator.list()
    for wrong in ([bare(1, 0)], [bare(1, 0, 1, 2)], [bare(1, 0, 1), bare(2, 1)], [bare(9, 0)]):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await coordinator.refresh(DEL, wrong, revision=11)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value.details()
        named = wrong[-1]
        assert f"instance {named.id}" in info.value.details()
        assert await coordinator.list() == before, "a refused DEL changes nothing"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coordinator.refresh(DEL, [bare(1, 0)], revision=11)
    assert "endpoint ids [0] do not match the published endpoint ids [0, 1]" in info.value.details()
    assert {await endpoint_of(http, coordinator, completion(max_tokens=1)) for _ in range(2)} == {"1/0"}

    # The exact view is withdrawn (revision 11 was not consumed by the refusals): its model is known,
    # so clients are told to retry later, not that the model does not exist.
    assert (await coordinator.refresh(DEL, [bare(1, 1, 0)], revision=11)).revision == 11
    reply = await post_json(http, coordinator.http_url + "/v1/completions", completion())
    assert_unavailable(reply)
    assert f"no instance serving model `{MODEL_A}` is published now" in reply.body["error"]["message"]
    assert [p.instance.id for p in (await coordinator.list()).instances] == [2]


async def test_stale_revision_is_refused(engines: Engines, coordinator: CoordinatorHandle) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)], revision=5)
    for stale in (5, 4, 0, -3):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await coordinator.refresh(ADD, [instance_proto(2, engines.group_b, MODEL_B)], revision=stale)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"revision {stale} is not greater than the last acknowledged revision 5" in info.value.details()
    listed = await coordinator.list()
    assert listed.revision == 5 and [p.instance.id for p in listed.instances] == [1]
    assert (await coordinator.refresh(ADD, [instance_proto(2, engines.group_b, MODEL_B)], revision=6)).revision == 6


async def test_invalid_refresh_is_refused(engines: Engines, coordinator: CoordinatorHandle) -> None:
    cases = [
        (coordinator_pb2.REFRESH_EVENT_UNSPECIFIED, [instance_proto(1, engines.group_a, MODEL_A)],
         "event REFRESH_EVENT_UNSPECIFIED"),
        (ADD, [bare(1)], "instance 1 has no endpoints"),
        (ADD, [common_pb2.Instance(id=1, model="m", endpoints=[common_pb2.Endpoint(id=0, ip="127.0.0.1")])],
         "business_port 0 not in 1..65535"),
        (SET, [common_pb2.Instance(id=1, model="m", endpoints=[common_pb2.Endpoint(id=0, ip="", business_port=80)])],
         "ip '' is empty"),
        (ADD, [common_pb2.Instance(id=1, model="m", endpoints=[
            common_pb2.Endpoint(id=3, ip="127.0.0.1", business_port=80),
            common_pb2.Endpoint(id=3, ip="127.0.0.2", business_port=81)])], "endpoint id 3 appears more than once"),
    ]
    for event, instances, named in cases:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await coordinator.refresh(event, instances, revision=1)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        assert named in info.value.details()
    assert (await coordinator.list()).revision == 0


async def test_pause_and_resume(engines: Engines, coordinator: CoordinatorHandle, http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A),
                                    instance_proto(2, engines.group_b, MODEL_B)])
    await coordinator.refresh(PAUSE, [bare(1)])
    listed = await coordinator.list()
    assert [(p.instance.id, p.paused) for p in listed.instances] == [(1, True), (2, False)]
    assert_unavailable(await post_json(http, coordinator.http_url + "/v1/completions", completion(model=MODEL_A)))
    assert {await endpoint_of(http, coordinator, completion(model=None, max_tokens=1)) for _ in range(3)} == {"2/0"}
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coordinator.refresh(RESUME, [bare(1), bare(42)])
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "[42]" in info.value.details()
    assert (await coordinator.list()).instances[0].paused, "a refused RESUME changes nothing"
    await coordinator.refresh(RESUME, [bare(1)])
    assert await endpoint_of(http, coordinator, completion(model=MODEL_A)) in ("1/0", "1/1")


async def test_withdrawn_endpoint_gets_no_new_request_and_in_flight_ones_finish(
    engines: Engines, coordinator: CoordinatorHandle, http: aiohttp.ClientSession
) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A)])
    first_event = asyncio.Event()

    async def on_event(_event) -> None:
        first_event.set()

    long_stream = asyncio.create_task(post_stream(http, coordinator.http_url + "/v1/completions",
                                                  completion(max_tokens=60), on_event=on_event))
    await asyncio.wait_for(first_event.wait(), 10)
    # The long stream holds rank 0 (lowest rank first); the Controller drains it: only rank 1 stays.
    assert dict((await coordinator.list()).instances[0].outstanding_requests) == {0: 1, 1: 0}
    await coordinator.refresh(DEL, [bare(1, 0, 1)])
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A, ranks=[1])])
    served = await asyncio.gather(*(endpoint_of(http, coordinator, completion(max_tokens=3)) for _ in range(4)))
    assert served == ["1/1"] * 4
    reply = await asyncio.wait_for(long_stream, 20)
    assert reply.headers["X-Motor-Endpoint"] == "1/0" and reply.done, "the in-flight request finished"
    view = await instances_view(http, coordinator.http_url)
    assert [(e["id"], e["outstanding_requests"]) for e in view["instances"][0]["endpoints"]] == [(1, 0)]


async def test_client_disconnect_cancels_the_upstream_request(engines: Engines, coordinator: CoordinatorHandle) -> None:
    await coordinator.refresh(ADD, [instance_proto(2, engines.group_b, MODEL_B)])
    engine = SimClient(engines.group_b.ranks[0].url)

    async def engine_in_flight() -> int:
        return (await asyncio.to_thread(engine.admin_state))["in_flight_requests"]

    async def coordinator_outstanding() -> int:
        return (await coordinator.list()).instances[0].outstanding_requests[0]

    # 400 tokens take 8 s; the aborts must be seen long before.
    for stream in (True, False):
        body = completion(model=MODEL_B, max_tokens=400, stream=stream)
        session = aiohttp.ClientSession()
        try:
            resp_task = asyncio.create_task(session.post(coordinator.http_url + "/v1/completions", json=body))
            await async_wait_for(engine_in_flight, 5, "the request reaching the engine", until=lambda n: n > 0)
            if stream:
                resp = await resp_task
                assert resp.status == 200
                await resp.content.readany()
                resp.close()
            else:
                resp_task.cancel()
        finally:
            await session.close()
        await async_wait_for(coordinator_outstanding, 3, f"stream={stream}: outstanding released", until=lambda n: n == 0)
        if stream:
            # The engine notices the closed connection at its next token (a non-streaming engine
            # request is only noticed when its response is written: an engine property).
            await async_wait_for(engine_in_flight, 3, "the engine request aborted", until=lambda n: n == 0)


async def test_request_id_is_accepted_or_generated(engines: Engines, coordinator: CoordinatorHandle,
                                                   http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    await coordinator.refresh(ADD, [instance_proto(2, engines.group_b, MODEL_B)])
    caplog.set_level("INFO", logger="motor.coordinator")
    given = await post_json(http, coordinator.http_url + "/v1/completions", completion(model=MODEL_B),
                            headers={"X-Request-Id": "client-req-42"})
    assert given.headers["X-Request-Id"] == "client-req-42"
    generated = await post_json(http, coordinator.http_url + "/v1/completions", completion(model=MODEL_B),
                                headers={"X-Request-Id": "bad id\twith spaces"})
    rid = generated.headers["X-Request-Id"]
    assert rid != "bad id\twith spaces" and len(rid) == 32
    lines = log_lines(caplog, "client-req-42")
    assert lines and all("instance=2 rank=0" in line for line in lines), lines


async def test_management_key_is_enforced_on_refresh_only(engines: Engines, start_coordinator: CoordinatorFactory,
                                                         http: aiohttp.ClientSession) -> None:
    c = await start_coordinator(management_key="s3cret-key")
    view = instance_proto(2, engines.group_b, MODEL_B)
    for key in (None, "wrong", "s3cret-ke"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await c.refresh(ADD, [view], revision=1, key=key)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "x-motor-key" in info.value.details() and "s3cret" not in info.value.details()
    listed = await c.list()  # read-only: open
    assert listed.revision == 0 and not listed.instances
    assert (await c.refresh(ADD, [view], revision=1)).revision == 1
    assert await endpoint_of(http, c, completion(model=MODEL_B)) == "2/0"


async def test_set_replaces_the_published_set(engines: Engines, coordinator: CoordinatorHandle,
                                              http: aiohttp.ClientSession) -> None:
    await coordinator.refresh(ADD, [instance_proto(1, engines.group_a, MODEL_A),
                                    instance_proto(2, engines.group_b, MODEL_B)])
    await coordinator.refresh(SET, [instance_proto(1, engines.group_a, MODEL_A, ranks=[1])])
    listed = await coordinator.list()
    assert [(p.instance.id, [e.id for e in p.instance.endpoints]) for p in listed.instances] == [(1, [1])]
    assert {await endpoint_of(http, coordinator, completion(max_tokens=1)) for _ in range(3)} == {"1/1"}
    withdrawn = await post_json(http, coordinator.http_url + "/v1/completions", completion(model=MODEL_B))
    assert_unavailable(withdrawn)
    assert f"no instance serving model `{MODEL_B}` is published now" in withdrawn.body["error"]["message"]
    assert (await post_json(http, coordinator.http_url + "/v1/completions", completion(model="x"))).status == 404


async def test_headless_endpoints_are_never_routed_to(engines: Engines, coordinator: CoordinatorHandle,
                                                      http: aiohttp.ClientSession) -> None:
    view = instance_proto(1, engines.group_a, MODEL_A, headless=[0])
    view.endpoints[0].business_port = 0  # a headless rank has no API of its own
    await coordinator.refresh(ADD, [view])
    served = await asyncio.gather(*(endpoint_of(http, coordinator, completion(max_tokens=3)) for _ in range(4)))
    assert served == ["1/1"] * 4
    await coordinator.refresh(DEL, [bare(1, 0, 1)])


async def test_request_is_held_through_a_drain_and_served_after_the_add(
        engines: Engines, start_coordinator: CoordinatorFactory, http: aiohttp.ClientSession) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=10.0)
    a = instance_proto(1, engines.group_a, MODEL_A)
    await c.refresh(ADD, [a])
    await c.refresh(DEL, [a])  # the drain of a scale-down round
    started = time.monotonic()
    pending = asyncio.create_task(post_json(http, c.http_url + "/v1/completions", completion(model=MODEL_A)))
    await asyncio.sleep(0.5)
    assert not pending.done(), "held, not failed, while nothing is published"
    await c.refresh(ADD, [a])  # the success ADD
    reply = await asyncio.wait_for(pending, 10)
    assert reply.status == 200, reply.body
    assert time.monotonic() - started >= 0.5  # it was held through the drain, then served


async def test_held_request_gets_503_when_the_hold_ends(start_coordinator: CoordinatorFactory,
                                                        http: aiohttp.ClientSession) -> None:
    c = await start_coordinator(hold_when_unavailable_sec=0.4, retry_after_sec=3)
    started = time.monotonic()
    reply = await post_json(http, c.http_url + "/v1/completions", completion(model=None))
    assert_unavailable(reply, retry_after="3")
    assert time.monotonic() - started >= 0.4
