"""The instance FT manager's inference front: SGLang's one HTTP endpoint for every DP rank of the
instance (``motor.sim.instance_ft`` serves it beside the FT API).

``POST /v1/completions`` and ``/v1/chat/completions`` go to the rank named by ``routed_dp_rank``
in the body (SGLang's ``Optional[int]`` field of ``CompletionRequest`` / ``ChatCompletionRequest``),
or to the next active rank, round robin, without it; the admission rules are
``InstanceFtState.route``'s. A ``routed_dp_rank`` that is not an integer in ``0..dp_size-1`` is 400.
``GET /v1/models`` is any active rank's answer. The body goes to the rank unchanged; a stream is
relayed chunk by chunk as it comes, a whole answer read up to ``MAX_ANSWER_BYTES``. Every forward
has a connect deadline and a total one (``--inference-timeout-sec``); a rank that cannot be reached
is 503, and a rank's stream that breaks breaks the client's (its connection is dropped, no clean end).
Errors are OpenAI-shaped: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from motor.sim.instance_ft_state import InstanceFtState, RouteRefusal
from motor.sim.instance_link import INTERNAL_PREFIX

log = logging.getLogger("motor.sim.instance_ft_inference")

INFERENCE_PATHS = ("/v1/completions", "/v1/chat/completions")
ROUTED_DP_RANK = "routed_dp_rank"
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_ANSWER_BYTES = 16 * 1024 * 1024
CONNECT_TIMEOUT_SEC = 2.0
_REQUEST_HEADERS = ("Content-Type", "Accept", "Authorization", "X-Request-Id")
_ANSWER_HEADERS = ("Content-Type", "Cache-Control", "X-Motor-DP-Rank", "X-Request-Id")


class BadRequest(ValueError):
    """HTTP 400: a body that is not a JSON object, or a malformed routed_dp_rank."""


def parse_routed_dp_rank(raw: bytes, dp_size: int) -> int | None:
    """The rank the request is pinned to, or None; BadRequest naming the malformed body or value."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object")
    value = doc.get(ROUTED_DP_RANK)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < dp_size:
        raise BadRequest(f"{ROUTED_DP_RANK} must be an integer in 0..{dp_size - 1}, got {json.dumps(value)}")
    return value


def error_answer(status: int, message: str) -> web.Response:
    kind = "BadRequestError" if status == 400 else "ServiceUnavailableError"
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": status}},
                             status=status)


def inference_url(state: InstanceFtState, rank: int, path: str) -> str:
    """Rank ``rank``'s own inference route: its link names its internal FT prefix on the same server."""
    base = state.links[rank].url
    return base[:-len(INTERNAL_PREFIX)] + path if base.endswith(INTERNAL_PREFIX) else base + path


async def read_bounded(resp: aiohttp.ClientResponse) -> bytes | None:
    """The whole answer, or None once it passed MAX_ANSWER_BYTES (nothing more is read)."""
    pieces: list[bytes] = []
    size = 0
    while chunk := await resp.content.read(min(1024 * 1024, MAX_ANSWER_BYTES + 1 - size)):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        pieces.append(chunk)
    return b"".join(pieces)


class InferenceFront:
    def __init__(self, state: InstanceFtState, *, timeout_sec: float) -> None:
        self.state = state
        self._timeout = aiohttp.ClientTimeout(total=timeout_sec, connect=CONNECT_TIMEOUT_SEC)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # No connection cap: every in-flight request (long streams included) has its own.
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False,
                                              connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def add_routes(self, app: web.Application) -> None:
        for path in INFERENCE_PATHS:
            app.router.add_post(path, self.generate)
        app.router.add_get("/v1/models", self.models)

    async def models(self, _: web.Request) -> web.Response:
        assert self._session is not None
        active = self.state.active_ranks(time.monotonic())
        if not active:
            return error_answer(503, "no DP rank is active")
        try:
            async with self._session.get(inference_url(self.state, active[0], "/v1/models")) as resp:
                body = await read_bounded(resp)
                if body is None:
                    return error_answer(502, f"DP rank {active[0]}'s answer exceeds {MAX_ANSWER_BYTES} bytes")
                return web.Response(status=resp.status, body=body, content_type=resp.content_type)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return error_answer(503, f"DP rank {active[0]} unreachable: {type(exc).__name__}")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        raw = await request.read()
        try:
            pinned = parse_routed_dp_rank(raw, self.state.dp_size)
        except BadRequest as exc:
            return error_answer(400, str(exc))
        rank = self.state.route(pinned, time.monotonic())
        if isinstance(rank, RouteRefusal):
            log.info("%s routed_dp_rank=%s -> %d %s", request.path, pinned, rank.status, rank.message)
            return error_answer(rank.status, rank.message)
        headers = {h: request.headers[h] for h in _REQUEST_HEADERS if h in request.headers}
        try:
            async with self._session.post(inference_url(self.state, rank, request.path), data=raw,
                                          headers=headers) as resp:
                answer = {h: resp.headers[h] for h in _ANSWER_HEADERS if h in resp.headers}
                if resp.status == 200 and resp.content_type == "text/event-stream":
                    return await self._relay_stream(request, resp, answer, rank)
                return await self._whole(resp, answer, rank)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("%s rank=%d unreachable: %s", request.path, rank, type(exc).__name__)
            return error_answer(503, f"DP rank {rank} unreachable: {type(exc).__name__}")

    async def _whole(self, resp: aiohttp.ClientResponse, headers: dict[str, str], rank: int) -> web.Response:
        if resp.content_length is not None and resp.content_length > MAX_ANSWER_BYTES:
            return error_answer(502, f"DP rank {rank}'s answer declares {resp.content_length} bytes, above "
                                     f"{MAX_ANSWER_BYTES}")
        body = await read_bounded(resp)
        if body is None:
            return error_answer(502, f"DP rank {rank}'s answer exceeds {MAX_ANSWER_BYTES} bytes")
        return web.Response(status=resp.status, body=body, headers=headers)

    async def _relay_stream(self, request: web.Request, resp: aiohttp.ClientResponse, headers: dict[str, str],
                            rank: int) -> web.StreamResponse:
        out = web.StreamResponse(status=200, headers=headers)
        await out.prepare(request)
        try:
            while True:
                try:
                    chunk = await resp.content.readany()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    # As a crashed server would: the client sees the connection drop, not a clean end.
                    log.warning("%s rank=%d stream broke: %s", request.path, rank, type(exc).__name__)
                    if request.transport is not None:
                        request.transport.abort()
                    return out
                if not chunk:
                    break
                await out.write(chunk)
            await out.write_eof()
        except ConnectionError:
            # The client went away: leaving the forward closes the rank's connection, aborting its request.
            log.info("%s rank=%d: client went away; forward aborted", request.path, rank)
        return out


def admin_counts(state: InstanceFtState) -> dict[str, Any]:
    """The inference part of ``GET /motor/admin/state``."""
    return {"pinned_requests": state.pinned_requests, "unpinned_requests": state.unpinned_requests,
            "forwarded_requests": state.forwarded_requests,
            "active_ranks": state.active_ranks(time.monotonic())}
