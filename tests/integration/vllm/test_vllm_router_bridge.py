"""The NodeManager's engine bridge (engine_http + engine_answers, prefix /fault_tolerance) against vLLM
0.33.0's own FT router, served as `vllm serve` builds it (its exception handlers) and, for the error
bodies, also on a bare FastAPI app (FastAPI's default handlers)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from gen.motor.v1 import common_pb2
from motor.testing.waits import async_wait_for
from nodemanager.engine_answers import (
    EngineIdentityError,
    EngineStatusEntry,
    build_scale_down_body,
    parse_apply_answer,
)
from nodemanager.engine_http import EngineAddress, EngineHttpClient

from .vllm_peer_helpers import FT_PREFIX, Peer, http_request

pytestmark = pytest.mark.timeout(240)  # per test, the module's peer start-up included

RANK = 1


@pytest.fixture
def peer(bridge_peer: Peer) -> Peer:
    return bridge_peer


@pytest.fixture
async def bridge() -> AsyncIterator[EngineHttpClient]:
    client = EngineHttpClient(FT_PREFIX, timeout_sec=5.0)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def addr(peer: Peer, endpoint_id: int = RANK) -> EngineAddress:
    return EngineAddress(endpoint_id, peer.host, peer.port)


def retry_body(request_id: str) -> str:
    return json.dumps({"instruction": "retry", "request_id": request_id, "params": {}})


async def wait_status(bridge: EngineHttpClient, peer: Peer, predicate: Callable[[EngineStatusEntry], bool],
                      what: str, timeout_sec: float = 10.0) -> EngineStatusEntry:
    """Reads the status route through the bridge until ``predicate`` holds (bounded)."""
    return await async_wait_for(lambda: bridge.read_status(addr(peer)), timeout_sec, what, until=predicate)


# -- status ------------------------------------------------------------------------------------------
async def test_status_document_and_identity(peer: Peer, bridge: EngineHttpClient) -> None:
    peer.push("healthy")
    assert peer.status_doc() == {"schema_version": 1, "total_engines": 1, "engines": [{"id": RANK, "status": "healthy"}]}
    entry = await bridge.read_status(addr(peer))
    assert (entry.id, entry.status, entry.ft_state, entry.fault_info, entry.mask) == (RANK, "healthy", None, None, ())
    assert entry.to_pb().status == common_pb2.ENGINE_HEALTH_HEALTHY


async def test_mismatched_id_is_an_identity_error(peer: Peer, bridge: EngineHttpClient) -> None:
    with pytest.raises(EngineIdentityError) as info:
        await bridge.read_status(addr(peer, endpoint_id=3))
    assert "the single entry has id 1, expected 3" in str(info.value) and "endpoint 3" in str(info.value)


async def test_unhealthy_with_extra_keys_and_mask(peer: Peer, bridge: EngineHttpClient) -> None:
    peer.push("unhealthy", fault_info="RuntimeError", mask=[1, 0, 1, 1], extra={"dp_rank": RANK, "engine_index": 0})
    assert peer.status_doc()["engines"][0]["engine_index"] == 0  # the router hands extras through
    entry = await bridge.read_status(addr(peer))
    assert (entry.status, entry.fault_info, entry.mask, entry.ft_state) == ("unhealthy", "RuntimeError", (1, 0, 1, 1), None)


async def test_diagnosing_and_dead_are_passed_through(peer: Peer, bridge: EngineHttpClient) -> None:
    peer.push("diagnosing")
    entry = await bridge.read_status(addr(peer))
    assert entry.status == "diagnosing" and entry.to_pb().status == common_pb2.ENGINE_HEALTH_DIAGNOSING
    peer.push("dead")
    entry = await bridge.read_status(addr(peer))
    assert (entry.status, entry.fault_info) == ("dead", None)
    assert entry.to_pb().status == common_pb2.ENGINE_HEALTH_DEAD


# -- apply ---------------------------------------------------------------------------------------------
async def test_retry_accepted_with_the_server_made_request_id(peer: Peer, bridge: EngineHttpClient) -> None:
    peer.push("unhealthy")
    ours = f"motor-{uuid.uuid4().hex[:8]}"
    outcome = await bridge.apply(addr(peer), retry_body(ours))
    assert outcome.accepted and outcome.http_status == 202, outcome
    # vLLM 0.33.0 ignores the body's request_id and makes its own: the bridge reports that one.
    assert outcome.engine_request_id != ours and str(uuid.UUID(outcome.engine_request_id)) == outcome.engine_request_id
    assert "poll /fault_tolerance/status" in outcome.message
    entry = await wait_status(bridge, peer, lambda e: e.status == "healthy", "healthy after retry")
    assert entry.last_ft_request_id is None and entry.ft_error is None  # the push replaced the entry
    handled = [h for h in peer.handled() if h["request_id"] == outcome.engine_request_id]
    assert handled == [{"instruction": "retry", "params": {}, "request_id": outcome.engine_request_id,
                        "success": True, "reason": None}]


async def test_refused_retry_is_correlated_only_by_the_server_request_id(peer: Peer, bridge: EngineHttpClient) -> None:
    peer.push("dead")
    outcome = await bridge.apply(addr(peer), retry_body("motor-on-a-dead-engine"))
    assert outcome.accepted and outcome.http_status == 202  # 202 only means accepted
    entry = await wait_status(bridge, peer, lambda e: e.ft_error is not None, "ft_error after a refused retry")
    assert entry.status == "dead"
    assert entry.last_ft_request_id == outcome.engine_request_id != "motor-on-a-dead-engine"
    assert entry.ft_error == f"[FT] Rejecting retry on engine {RANK}: status is DEAD"


@pytest.mark.parametrize("served", ["vllm_serve", "bare_fastapi"])
async def test_scale_down_is_an_invalid_instruction(served: str, peer: Peer, plain_peer: Peer,
                                                    bridge: EngineHttpClient) -> None:
    target = peer if served == "vllm_serve" else plain_peer
    target.push("unhealthy")
    before = len(target.handled())
    body = build_scale_down_body("sd-1-abc", [3], "127.0.0.1", 29603)
    outcome = await bridge.apply(addr(target), body)
    assert not outcome.accepted and outcome.http_status == 400, outcome
    assert outcome.message == "HTTP 400: Invalid instruction: 'scale_down'.", outcome.message
    assert outcome.engine_request_id == "" and outcome.request_body == body
    assert len(target.handled()) == before  # refused by the router: the engine never saw it


# -- content type ----------------------------------------------------------------------------------------
async def test_the_bridge_sends_json_and_is_accepted(plain_peer: Peer, bridge: EngineHttpClient) -> None:
    plain_peer.push("unhealthy")
    outcome = await bridge.apply(addr(plain_peer), retry_body("motor-json"))
    assert outcome.accepted and outcome.http_status == 202, outcome  # vLLM checks the media type first


@pytest.mark.parametrize("headers", [{}, {"Content-Type": "text/plain"}], ids=["no_content_type", "text_plain"])
def test_a_non_json_request_is_refused_as_vllm_does(peer: Peer, plain_peer: Peer, headers: dict[str, str]) -> None:
    body = retry_body("hand-made").encode()
    path = f"{FT_PREFIX}/apply"
    # As `vllm serve` answers: its validation handler makes it a 400 with vLLM's error body.
    served = http_request(peer.host, peer.port, "POST", path, body, headers)
    assert served.status == 400, served
    error = served.json()["error"]
    assert error["code"] == 400 and error["type"] == "Bad Request"
    assert "Unsupported Media Type: Only 'application/json' is allowed" in error["message"]
    accepted, rid, message = parse_apply_answer(served.status, served.text.encode())
    assert not accepted and rid == "" and "Unsupported Media Type" in message and message.startswith("HTTP 400: ")
    # The router on a bare FastAPI app: FastAPI's default validation handler, 422 and `detail` a list.
    bare = http_request(plain_peer.host, plain_peer.port, "POST", path, body, headers)
    assert bare.status == 422, bare
    assert bare.json() == {"detail": ["Unsupported Media Type: Only 'application/json' is allowed"]}
    assert parse_apply_answer(bare.status, bare.text.encode()) == (
        False, "", "HTTP 422: Unsupported Media Type: Only 'application/json' is allowed")
