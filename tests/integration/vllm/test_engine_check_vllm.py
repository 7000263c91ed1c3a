"""motorctl engine-check against vLLM 0.33.0's own FT router (the peer of tests/vllm_peer/serve.py)."""

from __future__ import annotations

import io
import re

import pytest

from motor.cli.motorctl import run
from motor.testing.waits import wait_for

from .vllm_peer_helpers import FT_PREFIX, Peer

pytestmark = pytest.mark.timeout(240)  # per test, the module's peer start-up included

RANK = 2


@pytest.fixture
def peer(check_peer: Peer) -> Peer:
    return check_peer


def engine_check(peer: Peer, *argv: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = run(["engine-check", peer.url, "--prefix", FT_PREFIX, "--rank", str(RANK), *argv], out=out)
    return code, out.getvalue().splitlines()


@pytest.mark.parametrize("status", ["healthy", "diagnosing", "unhealthy", "dead"])
def test_vllm_router_conforms_in_every_state(peer: Peer, status: str) -> None:
    peer.push(status)
    code, lines = engine_check(peer)
    assert code == 0, lines
    assert f"ok    identity: one entry, id {RANK} = --rank" in lines
    assert "ok    dialect: vLLM (no ft_state)" in lines
    assert any(line.startswith(f"ok    status: {status!r}") for line in lines), lines
    assert lines[-1] == "result: conforms to Motor's engine FT contract"


def test_retry_on_an_unhealthy_engine_reports_the_server_made_request_id(peer: Peer) -> None:
    peer.push("unhealthy")
    code, lines = engine_check(peer, "--try-retry")
    assert code == 0, lines
    assert any(re.fullmatch(r"ok    POST .*/fault_tolerance/apply \(retry, request_id engine-check-\w+\): HTTP 202 "
                            r"'Request accepted; poll /fault_tolerance/status for updates.'", line) for line in lines), lines
    made = next(re.search(r"carries request_id '([^']+)', made by the engine", line) for line in lines
                if "made by the engine" in line)
    assert made is not None, lines
    # vLLM handed the engine client the request id it made, not ours; the retry healed the engine.
    # The background recovery task runs after the 202 went out: wait for its effect.
    handled = wait_for(lambda: [h for h in peer.handled() if h["request_id"] == made.group(1)], 10.0,
                       "the retry handled")
    assert [(h["instruction"], h["success"]) for h in handled] == [("retry", True)]
    assert peer.status_doc()["engines"] == [{"id": RANK, "status": "healthy"}]


def test_retry_on_a_healthy_engine_is_accepted_then_refused_in_status(peer: Peer) -> None:
    peer.push("healthy")
    code, lines = engine_check(peer, "--try-retry")
    assert code == 0, lines
    # The refusal lands in the cached entry (last_ft_request_id, ft_error): still Motor's shape.
    wait_for(lambda: "ft_error" in peer.status_doc()["engines"][0], 10.0, "ft_error of the refused retry")
    code, lines = engine_check(peer)
    assert code == 0, lines
    assert "ok    last_ft_request_id: a string" in lines and "ok    ft_error: a string" in lines


def test_the_default_prefix_is_not_vllm_0_33s(peer: Peer) -> None:
    out = io.StringIO()
    code = run(["engine-check", peer.url, "--rank", str(RANK)], out=out)
    assert code == 1
    assert "HTTP 404, expected 200 (no route there: is --prefix right? vLLM 0.33.0 serves /fault_tolerance)" \
        in out.getvalue()


def test_vllm_0_33_has_no_scale_up(peer: Peer) -> None:
    """vLLM's released router declares no supported_instructions and refuses scale_up as it refuses
    scale_down: removed ranks come back by a planned restoration."""
    peer.push("healthy")
    code, lines = engine_check(peer)
    assert code == 0 and any(line.startswith("info  scale_up: not declared") for line in lines), lines
    reply = peer.request("POST", f"{FT_PREFIX}/apply", {
        "instruction": "scale_up", "request_id": "up-1",
        "params": {"added_dp_ranks": [1], "removed_dp_ranks": [], "dp_master_ip": "127.0.0.1", "dp_store_port": 1}})
    assert reply.status == 400 and "Invalid instruction" in reply.text, reply.text
