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

``--join`` (an elastic scale-up's joiner, docs/engine-protocol-scale-up.md): the rank reports
``healthy`` and waits for a ``scale_up`` naming it. A ``scale_up`` apply (joiner or survivor) is
checked as the contract says (400 naming the value), leaves ``healthy`` before the 202 and reads
``healthy`` again ``scale_up_sec`` later (a control key, default 0.2).

``--group``: the ranks of the process form one simulated DP group, each rank on its own
``host:port`` (routes in `motor.testing.fake_group_app`):

  python -m motor.testing.fake_engine --group --endpoints 127.0.0.2:9001,127.0.0.3:9002 --ranks 0,1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from motor.testing.fake_group_app import serve_group
from motor.testing.fake_http import exit_soon, health, stop_on_signals

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
    joiner: bool = False
    scale_up_sec: float = 0.2
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
                                              "fault_info", "last_ft_request_id", "hang_sec", "joiner",
                                              "scale_up_sec")}


def _scale_up(state: RankState, doc: dict[str, Any]) -> web.Response:
    """The contract's checks of a scale_up, then out of healthy before the 202 and back later."""
    params = doc.get("params") or {}
    added, removed = params.get("added_dp_ranks"), params.get("removed_dp_ranks")
    problem = ""
    if not isinstance(added, list) or not added:
        problem = f"added_dp_ranks {added!r} is empty"
    elif not isinstance(removed, list) or set(added) & set(removed):
        problem = f"removed_dp_ranks {removed!r} is not a list disjoint from added_dp_ranks {added}"
    elif not params.get("dp_master_ip") or not params.get("dp_store_port"):
        problem = "dp_master_ip and dp_store_port are required"
    elif state.joiner and state.rank not in added:
        problem = f"joiner {state.rank} is not in added_dp_ranks {added}"
    elif not state.joiner and state.rank in added:
        problem = f"rank {state.rank} is in the group: it cannot be added"
    if problem:
        return web.json_response({"detail": problem}, status=400)
    rid = doc.get("request_id")
    state.status, state.last_ft_request_id = "unhealthy", rid

    def joined() -> None:
        if state.last_ft_request_id == rid and state.status == "unhealthy":
            state.status, state.joiner = "healthy", False

    asyncio.get_running_loop().call_later(state.scale_up_sec, joined)
    return web.json_response({"message": "accepted", "request_id": rid}, status=202)


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
            doc = json.loads(raw)
            rid = doc.get("request_id")
        except (ValueError, AttributeError):
            return web.json_response({"detail": "body is not a JSON object"}, status=400)
        if doc.get("instruction") == "scale_up" and mode == "accept":
            return _scale_up(state, doc)
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

    app.router.add_get("/health", health)
    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
    app.router.add_post("/fake/control", control)
    app.router.add_get("/fake/applies", applies)
    app.router.add_get("/fake/stats", stats)
    app.router.add_post("/fake/exit", exit_soon)
    return app


async def serve(host: str, ports: list[int], ranks: list[int], prefix: str, status_mode: str,
                joiner: bool = False) -> None:
    stop = stop_on_signals()
    runners = []
    try:
        for port, rank in zip(ports, ranks):
            runner = web.AppRunner(build_app(RankState(rank, status_mode=status_mode, joiner=joiner), prefix),
                                   access_log=None,
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
    p.add_argument("--join", action="store_true", help="start as a joiner of an elastic scale-up (see above)")
    p.add_argument("--endpoints", help="--group: comma-separated host:port, one per rank")
    p.add_argument("--diagnosing-sec", type=float, default=1.5)
    p.add_argument("--rebuild-sec", type=float, default=0.05)
    p.add_argument("--checkin-sec", type=float, default=10.0)
    p.add_argument("--detect-sec", type=float, default=0.0, help="a peer's death seen after this long")
    p.add_argument("--per-token-latency-sec", type=float, default=0.0)
    p.add_argument("--model", default="motor-sim")
    p.add_argument("--ready-file")
    p.add_argument("--control", help="--group: host:port of the placeholders' lifecycle listener")
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
        control = None
        if args.control:
            host, _, port = args.control.rpartition(":")
            control = (host, int(port))
        asyncio.run(serve_group(endpoints, ranks, args.ft_api_prefix, model=args.model,
                                diagnosing_sec=args.diagnosing_sec, rebuild_sec=args.rebuild_sec,
                                checkin_sec=args.checkin_sec, detect_sec=args.detect_sec,
                                per_token_latency_sec=args.per_token_latency_sec, ready_file=args.ready_file,
                                control=control))
        return 0
    if args.ports:
        ports = [int(x) for x in args.ports.split(",")]
        ranks = [int(x) for x in args.ranks.split(",")] if args.ranks else list(range(len(ports)))
    else:
        ports, ranks = [args.port], [args.dp_rank]
    if len(ports) != len(ranks) or None in ports or None in ranks:
        p.error("give --port and --dp-rank, or --ports with as many --ranks")
    asyncio.run(serve(args.host, ports, ranks, args.ft_api_prefix, args.status_mode, args.join))
    return 0


if __name__ == "__main__":
    sys.exit(main())
