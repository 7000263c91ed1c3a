"""The NodeManager's engine HTTP client against a tiny aiohttp server that sends its bodies in pieces
and slowly: a body split into chunks inside the timeout is read whole, one still arriving past the
timeout is an EngineTimeout bounded by that timeout (apply: an outcome that says so), an oversized
body is refused naming the limit. Hypothesis draws the splits and delays (bounded example count,
reported in pytest's summary)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Hypothesis imports its optimiser lazily, which here would happen in the worker thread that runs the
# examples while the loop thread parses too; CPython 3.11.7's parser then fails with "AST constructor
# recursion depth mismatch". Imported up front, nothing is parsed in the worker.
import hypothesis.internal.conjecture.optimiser  # noqa: F401  # isort: skip

from nodemanager.engine_answers import EngineStatusMalformed, EngineTimeout
from nodemanager.engine_http import MAX_BODY_BYTES, EngineAddress, EngineHttpClient

PREFIX = "/v1/fault_tolerance"
TIMEOUT_SEC = 0.6
BODY = json.dumps({"schema_version": 1, "total_engines": 1,
                   "engines": [{"id": 4, "status": "unhealthy", "fault_info": "peer 1 " + "x" * 3000}]}).encode()
EXAMPLES = int(os.environ.get("MOTOR_FUZZ_EXAMPLES_SLOW", "12"))

pytestmark = pytest.mark.timeout(180)


class Script:
    """What the next answer looks like: body pieces and the pause before each."""

    def __init__(self) -> None:
        self.status = 200
        self.pieces: list[tuple[float, bytes]] = [(0.0, BODY)]
        self.content_length = True


async def _answer(request: web.Request, script: Script) -> web.StreamResponse:
    resp = web.StreamResponse(status=script.status, headers={"Content-Type": "application/json"})
    if script.content_length:
        resp.content_length = sum(len(p) for _, p in script.pieces)
    else:
        resp.enable_chunked_encoding()
    await resp.prepare(request)
    for pause, piece in script.pieces:
        if pause:
            await asyncio.sleep(pause)
        await resp.write(piece)
    await resp.write_eof()
    return resp


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Script, EngineAddress]]:
    script = Script()

    async def handle(request: web.Request) -> web.StreamResponse:
        return await _answer(request, script)

    app = web.Application()
    app.router.add_get(f"{PREFIX}/status", handle)
    app.router.add_post(f"{PREFIX}/apply", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield script, EngineAddress(4, "127.0.0.1", int(runner.addresses[0][1]))
    finally:
        await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[EngineHttpClient]:
    http = EngineHttpClient(PREFIX, TIMEOUT_SEC)
    await http.start()
    try:
        yield http
    finally:
        await http.close()


def _split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % len(body) for c in cuts} - {0})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)])]


async def test_a_body_in_pieces_within_the_timeout_is_read_whole(engine, client: EngineHttpClient) -> None:
    script, addr = engine
    for content_length in (True, False):
        script.content_length = content_length
        script.pieces = [(0.0 if i == 0 else 0.05, p) for i, p in enumerate(_split(BODY, [7, 1500, 3001]))]
        entry = await client.read_status(addr)
        assert (entry.id, entry.status) == (4, "unhealthy") and entry.fault_info.endswith("x" * 3000)


async def test_a_body_still_arriving_past_the_timeout_is_a_bounded_timeout(engine, client: EngineHttpClient) -> None:
    script, addr = engine
    script.pieces = [(0.0, BODY[:100]), (3.0, BODY[100:])]
    started = time.monotonic()
    with pytest.raises(EngineTimeout, match=f"endpoint 4: GET .* did not answer within {TIMEOUT_SEC:g}s"):
        await client.read_status(addr)
    assert time.monotonic() - started < TIMEOUT_SEC + 0.5
    started = time.monotonic()
    outcome = await client.apply(addr, "{}")
    assert not outcome.accepted and "did not answer within" in outcome.message
    assert time.monotonic() - started < TIMEOUT_SEC + 0.5


async def test_an_oversized_status_body_is_refused_naming_the_limit(engine, client: EngineHttpClient) -> None:
    script, addr = engine
    script.pieces = [(0.0, b"x" * (64 * 1024))] * (MAX_BODY_BYTES // (64 * 1024) + 1)
    with pytest.raises(EngineStatusMalformed, match=f"more than {MAX_BODY_BYTES} bytes"):
        await client.read_status(addr)


async def test_fuzz_splits_and_delays(engine, client: EngineHttpClient, fuzz_report) -> None:
    script, addr = engine
    outcomes: Counter[str] = Counter()
    loop = asyncio.get_running_loop()

    # Runs the async client from hypothesis's synchronous test body on this test's loop, in a
    # worker thread so the loop keeps serving the tiny engine meanwhile.
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(cuts=st.lists(st.integers(0, len(BODY)), max_size=5),
           pauses=st.lists(st.sampled_from([0.0, 0.01, 0.05, 0.15, 0.4]), min_size=6, max_size=6),
           chunked=st.booleans())
    def run(cuts: list[int], pauses: list[float], chunked: bool) -> None:
        pieces = _split(BODY, cuts)
        script.content_length = not chunked
        script.pieces = [(pauses[i], p) for i, p in enumerate(pieces)]
        total = sum(pauses[: len(pieces)])
        started = time.monotonic()
        try:
            entry = asyncio.run_coroutine_threadsafe(client.read_status(addr), loop).result(10)
        except EngineTimeout:
            assert total > TIMEOUT_SEC - 0.2, f"timed out although the body took {total:.2f}s"
            assert time.monotonic() - started < TIMEOUT_SEC + 0.5
            outcomes["timeout"] += 1
            return
        assert total < TIMEOUT_SEC + 0.2, f"read a body that took {total:.2f}s, past {TIMEOUT_SEC}s"
        assert entry.status == "unhealthy" and entry.fault_info.endswith("x" * 3000)
        outcomes["read whole"] += 1

    await asyncio.to_thread(run)
    fuzz_report(f"engine HTTP slow/split bodies: {sum(outcomes.values())} cases {dict(outcomes)}")
