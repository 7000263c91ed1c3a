"""The light fake engine's ``--group`` mode over HTTP: each rank of one simulated DP group
(`motor.testing.fake_group`: the reference engine's vLLM-dialect FT protocol with ``diagnosing``, a
scale_down round with check-in and rebuild, 503 while not healthy) on its own ``host:port``, serving
OpenAI completions (toy tokens of `motor.sim.toy_model`, ``--per-token-latency-sec`` apart).

Routes per rank: ``GET /health``, ``GET {prefix}/status``, ``POST {prefix}/apply``,
``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``,
``POST /motor/admin/inject`` ``{"fault": NAME, ...params}`` (the reference engine's route, fault
names and parameters, so `motorctl inject` works here too) → 200 ``{"fault", "rank", "entry",
"injections"}`` or 400 ``{"detail"}``, ``GET /motor/admin/state`` (``{"rank", "status",
"in_flight_requests"}``, a part of the reference engine's answer), ``GET /fake/journal[?since=N]``
(every transition with its wall time), ``GET /fake/group``, ``POST /fake/exit``. ``GET /health``
answers 503 while the rank's placeholder is stopped.

With ``control`` (``--control host:port``), one more listener takes the placeholders' lifecycle:
``POST /fake/lifecycle`` ``{"rank", "event": "started" | "stopped"}`` (`motor.testing.fake_placeholder`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from aiohttp import web

from motor.sim.injection import ADMIN_PREFIX
from motor.sim.toy_model import chat_prompt, token_text
from motor.sim.toy_model import generate as generate_tokens
from motor.testing.fake_group import ApplyRejected, FakeDpGroup
from motor.testing.fake_http import exit_soon, health, stop_on_signals

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _prompt_of(doc: dict[str, Any], chat: bool) -> str:
    if chat:
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        return chat_prompt([(str(m.get("role", "user")), str(m.get("content", ""))) for m in messages
                            if isinstance(m, dict)],
                           add_generation_prompt=doc.get("add_generation_prompt", True) is not False,
                           continue_final_message=doc.get("continue_final_message") is True)
    prompt = doc.get("prompt", "")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else ""
    if not isinstance(prompt, str):
        raise ValueError("prompt must be a string")
    return prompt


def build_group_app(group: FakeDpGroup, rank: int, prefix: str, model: str, per_token_latency_sec: float,
                    max_tokens_limit: int = 4096) -> web.Application:
    """One rank of a simulated group: FT API from the group, OpenAI completions while it serves."""
    app = web.Application()
    rank_header = {"X-Motor-DP-Rank": str(rank)}
    in_flight = [0]  # completions generating on this rank now

    async def rank_health(_: web.Request) -> web.Response:
        return web.Response(status=503 if group.ranks[rank].stopped else 200)

    async def status(_: web.Request) -> web.Response:
        await group.ranks[rank].injections.wait_status_released()  # hang_status
        return web.json_response({"schema_version": 1, "total_engines": 1, "engines": [group.ranks[rank].entry()]})

    async def apply(request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            return web.json_response({"detail": [{"type": "model_attributes_type", "loc": ["body"],
                                                  "msg": "Input should be a valid dictionary"}]}, status=400)
        try:
            body = json.loads(await request.read())
            rid = group.apply(rank, body)
        except ValueError as exc:
            return web.json_response({"detail": f"body is not JSON: {exc}"}, status=400)
        except ApplyRejected as exc:
            return web.json_response({"detail": str(exc)}, status=400)
        return web.json_response({"message": "scale_down accepted", "request_id": rid}, status=202)

    async def inject(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError(f"body must be a JSON object, got {type(body).__name__}")
            params = {k: v for k, v in body.items() if k != "fault"}
            entry = group.inject(rank, body.get("fault"), params)
        except ValueError as exc:
            return web.json_response({"detail": str(exc)}, status=400)
        return web.json_response({"fault": body["fault"], "rank": rank, "entry": entry,
                                  "injections": group.ranks[rank].injections.to_json()})

    async def state(_: web.Request) -> web.Response:
        return web.json_response({"rank": rank, "status": group.ranks[rank].status, "in_flight_requests": in_flight[0]})

    async def journal(request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0") or 0)
        return web.json_response({"next": len(group.journal), "events": group.journal[since:]})

    async def describe(_: web.Request) -> web.Response:
        return web.json_response(group.describe())

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model", "created": 0,
                                                              "owned_by": "motor-fake-engine"}]})

    def unavailable() -> web.Response:
        r = group.ranks[rank]
        return web.json_response({"error": {"message": f"rank {rank} is {r.status}", "type": "ServiceUnavailableError",
                                            "param": None, "code": 503}}, status=503, headers=rank_header)

    async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            doc = json.loads(await request.read())
            if not isinstance(doc, dict):
                raise ValueError("body must be a JSON object")
            prompt = _prompt_of(doc, chat)
            max_tokens = int(doc.get("max_completion_tokens") or doc.get("max_tokens") or 16)
            if not 1 <= max_tokens <= max_tokens_limit:
                raise ValueError(f"max_tokens {max_tokens} is not in 1..{max_tokens_limit}")
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": {"message": str(exc), "type": "BadRequestError", "param": None,
                                                "code": 400}}, status=400)
        if not group.serving(rank):
            return unavailable()
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        tokens = generate_tokens(prompt, max_tokens)
        if not doc.get("stream"):
            for _ in tokens:
                if per_token_latency_sec > 0:
                    await asyncio.sleep(per_token_latency_sec)
                if not group.serving(rank):
                    return unavailable()
            text = "".join(token_text(t) for t in tokens)
            choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                       "finish_reason": "length"} if chat else
                                      {"index": 0, "text": text, "finish_reason": "length"})
            return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                                      "created": created, "model": model, "choices": [choice],
                                      "usage": {"prompt_tokens": max(1, len(prompt.split())),
                                                "completion_tokens": len(tokens),
                                                "total_tokens": max(1, len(prompt.split())) + len(tokens)}},
                                     headers=rank_header)
        resp = web.StreamResponse(headers={**_SSE_HEADERS, **rank_header})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"
        try:
            for n, tid in enumerate(tokens, 1):
                if per_token_latency_sec > 0:
                    await asyncio.sleep(per_token_latency_sec)
                if not group.serving(rank):
                    await resp.write(b'data: {"error": {"message": "engine not healthy", '
                                     b'"type": "ServiceUnavailableError", "code": 503}}\n\n')
                    return resp
                finish = "length" if n == len(tokens) else None
                choice = ({"index": 0, "delta": {"content": token_text(tid)}, "finish_reason": finish} if chat
                          else {"index": 0, "text": token_text(tid), "finish_reason": finish})
                chunk = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    async def counted(request: web.Request, chat: bool) -> web.StreamResponse:
        in_flight[0] += 1
        try:
            return await generate(request, chat)
        finally:
            in_flight[0] -= 1

    async def completions(request: web.Request) -> web.StreamResponse:
        return await counted(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await counted(request, chat=True)

    app.router.add_get("/health", rank_health)
    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
    app.router.add_post(f"{ADMIN_PREFIX}/inject", inject)
    app.router.add_get(f"{ADMIN_PREFIX}/state", state)
    app.router.add_get("/fake/journal", journal)
    app.router.add_get("/fake/group", describe)
    app.router.add_post("/fake/exit", exit_soon)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


def build_control_app(group: FakeDpGroup) -> web.Application:
    """The placeholders' lifecycle reports (a killed rank's own listener is closed)."""
    app = web.Application()

    async def lifecycle(request: web.Request) -> web.Response:
        body = await request.json()
        rank, event = body.get("rank"), body.get("event")
        if rank not in group.ranks or event not in ("started", "stopped"):
            return web.json_response({"detail": f"unknown rank {rank!r} or event {event!r}"}, status=400)
        if event == "started":
            group.started(rank)
        else:
            group.stopped(rank)
        return web.json_response(group.ranks[rank].entry())

    app.router.add_get("/health", health)
    app.router.add_post("/fake/lifecycle", lifecycle)
    return app


async def serve_group(endpoints: list[tuple[str, int]], ranks: list[int], prefix: str, *, model: str,
                      diagnosing_sec: float, rebuild_sec: float, checkin_sec: float, detect_sec: float,
                      per_token_latency_sec: float, ready_file: str | None,
                      control: tuple[str, int] | None = None) -> None:
    stop = stop_on_signals()
    group = FakeDpGroup(ranks, diagnosing_sec=diagnosing_sec, rebuild_sec=rebuild_sec, checkin_sec=checkin_sec,
                        detect_sec=detect_sec)
    runners: dict[int, web.AppRunner] = {}
    closing: set[asyncio.Task[None]] = set()

    def kill(rank: int) -> None:
        runner = runners.pop(rank, None)
        if runner is not None:  # the rank's process is gone: its listener and connections with it
            task = asyncio.create_task(runner.cleanup())
            closing.add(task)
            task.add_done_callback(closing.discard)

    address = dict(zip(ranks, endpoints, strict=True))

    async def open_rank(rank: int) -> web.AppRunner:
        runner = web.AppRunner(build_group_app(group, rank, prefix, model, per_token_latency_sec),
                               access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        host, port = address[rank]
        await web.TCPSite(runner, host, port, backlog=1024).start()
        return runner

    def reopen(rank: int) -> None:
        earlier = list(closing)  # the killed listener's cleanup frees the port first

        async def run() -> None:
            await asyncio.gather(*earlier, return_exceptions=True)
            if rank not in runners:
                runners[rank] = await open_rank(rank)
        task = asyncio.create_task(run())
        closing.add(task)
        task.add_done_callback(closing.discard)

    group.on_kill = kill
    group.on_start = reopen
    try:
        for rank in ranks:
            runners[rank] = await open_rank(rank)
        if control is not None:
            control_runner = web.AppRunner(build_control_app(group), access_log=None, shutdown_timeout=0.1)
            await control_runner.setup()
            await web.TCPSite(control_runner, *control).start()
            runners[-1] = control_runner
        print(f"fake engine group of {len(ranks)} ranks serving on {len({h for h, _ in endpoints})} hosts "
              f"(diagnosing {diagnosing_sec:g}s, rebuild {rebuild_sec:g}s)", flush=True)
        if ready_file:
            tmp = ready_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"pid": os.getpid(), "ranks": len(ranks)}, fh)
            os.replace(tmp, ready_file)
        await stop.wait()
    finally:
        for runner in list(runners.values()):
            await runner.cleanup()
        await asyncio.gather(*closing, return_exceptions=True)
