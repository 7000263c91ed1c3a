"""Fixtures: vLLM 0.33.0's released FT router as a real peer (tests/vllm_peer/serve.py).

The peer runs in the side venv ``.venv-vllm`` (``make test`` creates it through ``make deps``); these
tests skip only when that venv is absent, and say how to make it.

Each peer costs a cold import of vLLM (tens of seconds here), so every peer the collected tests ask
for is launched at once, at the first one's set-up, and they import side by side.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .vllm_peer_helpers import Peer, StartingPeer, launch_peer, vllm_python

# Fixture name -> (rank, plain FastAPI errors). Rank 1 twice: two differently configured routers.
PEERS = {
    "check_peer": (2, False),
    "bridge_peer": (1, False),
    "plain_peer": (1, True),
}


@pytest.fixture(scope="session")
def peer_python() -> str:
    python = vllm_python()
    if python is None:
        pytest.skip("the side venv .venv-vllm is absent: run `make .venv-vllm/.installed` (part of `make deps`)")
    return python


@pytest.fixture(scope="session")
def vllm_peers(request: pytest.FixtureRequest, peer_python: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Peer]]:
    """The peers the session's tests use (by fixture name), launched together; all stopped at the end."""
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())
              if name in PEERS}
    names = sorted(wanted)
    starting: dict[str, StartingPeer] = {}
    ready: dict[str, Peer] = {}
    try:
        for name in names:
            rank, plain = PEERS[name]
            starting[name] = launch_peer(peer_python, rank, "127.0.0.1", tmp_path_factory.mktemp(f"vllm-{name}"),
                                         plain_fastapi_errors=plain)
        for name, pending in starting.items():
            ready[name] = pending.ready()
        yield ready
    finally:
        for pending in starting.values():
            pending.proc.stop(grace_sec=5)


def _peer(vllm_peers: dict[str, Peer], name: str) -> Peer:
    if name not in vllm_peers:
        pytest.fail(f"peer {name!r} was not started: name it as a fixture argument of the test")
    return vllm_peers[name]


@pytest.fixture
def check_peer(vllm_peers: dict[str, Peer]) -> Peer:
    return _peer(vllm_peers, "check_peer")


@pytest.fixture
def bridge_peer(vllm_peers: dict[str, Peer]) -> Peer:
    return _peer(vllm_peers, "bridge_peer")


@pytest.fixture
def plain_peer(vllm_peers: dict[str, Peer]) -> Peer:
    return _peer(vllm_peers, "plain_peer")
