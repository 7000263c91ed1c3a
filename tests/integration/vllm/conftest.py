"""Fixtures: vLLM 0.33.0's released FT router as a real peer (tests/vllm_peer/serve.py).

The peer runs in the side venv ``.venv-vllm`` (``make test`` creates it through ``make deps``); these
tests skip only when that venv is absent, and say how to make it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .vllm_peer_helpers import Peer, start_peer, vllm_python


@pytest.fixture(scope="session")
def peer_python() -> str:
    python = vllm_python()
    if python is None:
        pytest.skip("the side venv .venv-vllm is absent: run `make .venv-vllm/.installed` (part of `make deps`)")
    return python


@pytest.fixture(scope="module")
def spawn_peer(peer_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Peer]]:
    """Starts peers for the module; every one is stopped by its process group at the end."""
    started: list[Peer] = []

    def spawn(rank: int, host: str = "127.0.0.1", *, plain_fastapi_errors: bool = False) -> Peer:
        peer = start_peer(peer_python, rank, host, tmp_path_factory.mktemp(f"vllm-peer-rank{rank}"),
                          plain_fastapi_errors=plain_fastapi_errors)
        started.append(peer)
        return peer

    try:
        yield spawn
    finally:
        for peer in started:
            peer.proc.stop(grace_sec=5)
