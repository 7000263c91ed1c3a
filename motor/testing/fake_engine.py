"""A light fake engine: the FT HTTP API of one or many DP ranks in one small aiohttp process.

For NodeManager tests (identity violations, garbage, hangs, apply answers) and the polling
benchmark (many engines without many torch processes). One port per rank, each rank with its own
switchable behaviour:

  python -m motor.testing.fake_engine --host 127.0.0.2 --port 8001 --dp-rank 1
  python -m motor.testing.fake_engine --host 127.0.0.1 --ports 9001,9002 --ranks 0,1

Routes per port: ``GET /health``; ``GET {prefix}/status``; ``POST {prefix}/apply``;
``POST /fake/control`` ``{"status_mode"?, "apply_mode"?, "status"?, "ft_state"?, "fault_info"?,
"hang_sec"?}`` → the new control state; ``GET /fake/applies`` → every apply received
(``{"body", "content_type"}``); ``GET /fake/stats`` → request counters; ``POST /fake/exit`` ``{"code"}`` exits the process.

status_mode: ok | wrong_id | duplicate | extra | empty | garbage | bad_status | http500 | hang |
not_object. apply_mode: accept | accept_server_id | reject_str | reject_list | hang.

``--group``: the ranks of the process form one simulated DP group (`motor.testing.fake_group`, the
reference engine's vLLM-dialect FT protocol with ``diagnosing``, a scale_down round with check-in
and rebuild, 503 while not healthy) and serve OpenAI completions (toy tokens of
`motor.sim.toy_model`, ``--per-token-latency-sec`` apart), each rank on its own ``host:port``:

  python -m motor.testing.fake_engine --group --endpoints 127.0.0.2:9001,127.0.0.3:9002 --ranks 0,1

Group routes per port: ``GET /health``, ``GET {prefix}/status``, ``POST {prefix}/apply``,
``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``POST /motor/admin/inject``
``{"fault": NAME, ...params}`` (the reference engine's route, fault names and parameters, so
`motorctl inject` works here too; see `motor.testing.fake_group`) → 200 ``{"fault", "rank", "entry", "injections"}`` or 400 ``{"detail"}``,
``GET /fake/journal[?since=N]`` (every transition with its wall time), ``GET /fake/group``,
``POST /fake/exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from motor.sim.injection import ADMIN_PREFIX
from motor.sim.toy_model import chat_prompt, token_text
from motor.sim.toy_model import generate as generate_tokens
from motor.testing.fake_group import ApplyRejected, FakeDpGroup

STATUS_MODES = ("ok", "wrong_id", "duplicate", "extra", "empty", "garbage", "bad_status", "http500", "hang",
                "not_object")
APPLY_MODES = ("accept", "accept_server_id", "reject_str", "reject_list", "hang")


@dataclass
class RankState:
    rank: int
    status_mode: str = "ok"
    apply_mode: str = "accept"
    status: str = "healthy"
    ft_state: str | None = None
    fault_info: str | None = None
    last_ft_request_id: str | None = None
    hang_sec: float = 3600.0
    applies: list[dict[str, Any]] = field(default_factory=list)
    status_requests: int = 0

    def entry(self, rank: int | None = None) -> dict[str, Any]:
        e: dict[str, Any] = {"id": self.rank if rank is None else rank, "status": self.status}
        for key in ("ft_state", "fault_info", "last_ft_request_id"):
            value = getattr(self, key)
            if value is not None:
                e[key] = value
        return e

    def control(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("rank", "status_mode", "apply_mode", "status", "ft_state",
                                              "fault_info", "last_ft_request_id", "hang_sec")}


async def _health(_: web.Request) -> web.Response:
    return web.Response(status=200)


async def _exit_now(request: web.Request) -> web.Response:
    code = int((await request.json()).get("code", 1))
    # Later, so the answer still goes out.
    asyncio.get_running_loop().call_later(0.05, os._exit, code)
    return web.json_response({"exiting": code})


def _stop_on_signals() -> asyncio.Event:
    """Set by SIGTERM or SIGINT, so the listeners are cleaned up rather than killed."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def build_app(state: RankState, prefix: str) -> web.Application:
    app = web.Application()

    async def status(_: web.Request) -> web.Response:
        state.status_requests += 1
        mode = state.status_mode
        doc: Any
        if mode == "hang":
            await asyncio.sleep(state.hang_sec)
            mode = "ok"
        if mode == "garbage":
            return web.Response(text="<html>not json", content_type="text/html")
        if mode == "http500":
            return web.Response(status=500, text="internal error")
        if mode == "not_object":
            return web.json_response([1, 2])
        engines = {
            "ok": [state.entry()],
            "wrong_id": [state.entry(state.rank + 100)],
            "duplicate": [state.entry(), state.entry()],
            "extra": [state.entry(), state.entry(state.rank + 50)],
            "empty": [],
            "bad_status": [{**state.entry(), "status": "zombie"}],
        }[mode]
        doc = {"schema_version": 1, "total_engines": len(engines), "engines": engines}
        return web.json_response(doc)

    async def apply(request: web.Request) -> web.Response:
        raw = await request.text()
        state.applies.append({"body": raw, "content_type": request.headers.get("Content-Type", "")})
        mode = state.apply_mode
        if mode == "hang":
            await asyncio.sleep(state.hang_sec)
        if mode == "reject_str":
            return web.json_response({"detail": "Invalid instruction"}, status=400)
        if mode == "reject_list":
            return web.json_response(
                {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]}, status=400
            )
        try:
            rid = json.loads(raw).get("request_id")
        except (ValueError, AttributeError):
            return web.json_response({"detail": "body is not a JSON object"}, status=400)
        if mode == "accept_server_id":
            rid = uuid.uuid4().hex
        state.last_ft_request_id = rid
        return web.json_response({"message": "accepted", "request_id": rid}, status=202)

    async def control(request: web.Request) -> web.Response:
        body = await request.json()
        for key, value in body.items():
            if key == "status_mode" and value not in STATUS_MODES:
                return web.json_response({"detail": f"unknown status_mode {value!r}"}, status=400)
            if key == "apply_mode" and value not in APPLY_MODES:
                return web.json_response({"detail": f"unknown apply_mode {value!r}"}, status=400)
            if not hasattr(state, key) or key in ("rank", "applies", "status_requests"):
                return web.json_response({"detail": f"unknown key {key!r}"}, status=400)
            setattr(state, key, value)
        return web.json_response(state.control())

    async def applies(_: web.Request) -> web.Response:
        return web.json_response(state.applies)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"rank": state.rank, "status_requests": state.status_requests,
                                  "applies": len(state.applies)})

    app.router.add_get("/health", _health)
    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
    app.router.add_post("/fake/control", control)
    app.router.add_get("/fake/applies", applies)
    app.router.add_get("/fake/stats", stats)
    app.router.add_post("/fake/exit", _exit_now)
    return app


_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _prompt_of(doc: dict[str, Any], chat: bool) -> str:
    if chat:
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        return chat_prompt([(str(m.get("role", "user")), str(m.get("content", ""))) for m in messages
                            if isinstance(m, dict)])
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

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=True)

    app.router.add_get("/health", _health)
    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
    app.router.add_post(f"{ADMIN_PREFIX}/inject", inject)
    app.router.add_get("/fake/journal", journal)
    app.router.add_get("/fake/group", describe)
    app.router.add_post("/fake/exit", _exit_now)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def serve_group(endpoints: list[tuple[str, int]], ranks: list[int], prefix: str, *, model: str,
                      diagnosing_sec: float, rebuild_sec: float, checkin_sec: float, detect_sec: float,
                      per_token_latency_sec: float, ready_file: str | None) -> None:
    stop = _stop_on_signals()
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

    group.on_kill = kill
    try:
        for (host, port), rank in zip(endpoints, ranks, strict=True):
            runner = web.AppRunner(build_group_app(group, rank, prefix, model, per_token_latency_sec),
                                   access_log=None, shutdown_timeout=0.1)
            await runner.setup()
            await web.TCPSite(runner, host, port, backlog=1024).start()
            runners[rank] = runner
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


async def serve(host: str, ports: list[int], ranks: list[int], prefix: str, status_mode: str) -> None:
    stop = _stop_on_signals()
    runners = []
    try:
        for port, rank in zip(ports, ranks):
            runner = web.AppRunner(build_app(RankState(rank, status_mode=status_mode), prefix), access_log=None,
                                   shutdown_timeout=0.5)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            runners.append(runner)
        print(f"fake engine serving ranks {ranks} on {host} ports {ports}", flush=True)
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fake-engine")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--dp-rank", type=int)
    p.add_argument("--ports", help="comma-separated ports (many ranks in one process)")
    p.add_argument("--ranks", help="comma-separated ranks, one per port")
    p.add_argument("--ft-api-prefix", default="/v1/fault_tolerance")
    p.add_argument("--status-mode", default="ok", choices=STATUS_MODES)
    p.add_argument("--group", action="store_true", help="the ranks form one simulated DP group (see above)")
    p.add_argument("--endpoints", help="--group: comma-separated host:port, one per rank")
    p.add_argument("--diagnosing-sec", type=float, default=1.5)
    p.add_argument("--rebuild-sec", type=float, default=0.05)
    p.add_argument("--checkin-sec", type=float, default=10.0)
    p.add_argument("--detect-sec", type=float, default=0.0, help="a peer's death seen after this long")
    p.add_argument("--per-token-latency-sec", type=float, default=0.0)
    p.add_argument("--model", default="motor-sim")
    p.add_argument("--ready-file")
    args, _unknown = p.parse_known_args(argv)  # tolerate engine flags meant for a real engine
    if args.group:
        if not args.endpoints:
            p.error("--group needs --endpoints")
        endpoints = []
        for item in args.endpoints.split(","):
            host, _, port = item.rpartition(":")
            endpoints.append((host, int(port)))
        ranks = [int(x) for x in args.ranks.split(",")] if args.ranks else list(range(len(endpoints)))
        if len(ranks) != len(endpoints):
            p.error(f"{len(endpoints)} endpoints but {len(ranks)} ranks")
        asyncio.run(serve_group(endpoints, ranks, args.ft_api_prefix, model=args.model,
                                diagnosing_sec=args.diagnosing_sec, rebuild_sec=args.rebuild_sec,
                                checkin_sec=args.checkin_sec, detect_sec=args.detect_sec,
                                per_token_latency_sec=args.per_token_latency_sec, ready_file=args.ready_file))
        return 0
    if args.ports:
        ports = [int(x) for x in args.ports.split(",")]
        ranks = [int(x) for x in args.ranks.split(",")] if args.ranks else list(range(len(ports)))
    else:
        ports, ranks = [args.port], [args.dp_rank]
    if len(ports) != len(ranks) or None in ports or None in ranks:
        p.error("give --port and --dp-rank, or --ports with as many --ranks")
    asyncio.run(serve(args.host, ports, ranks, args.ft_api_prefix, args.status_mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
