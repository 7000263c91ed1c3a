"""vLLM 0.33.0's own fault-tolerance router as a test peer: one engine in external-LB mode.

Run with the side venv's python (``make test`` builds ``.venv-vllm/``; see requirements.txt):

  .venv-vllm/bin/python tests/vllm_peer/serve.py --dp-rank 1 --host 127.0.0.2 --port 8001

The app is assembled from vLLM's released modules the way ``vllm serve --enable-fault-tolerance``
assembles them: ``register_fault_tolerance_api_router(app)`` (``GET /fault_tolerance/status``,
``POST /fault_tolerance/apply``), vLLM's ``/health`` router and vLLM's exception handlers
(``init_exception_handler``, so refusals carry vLLM's ``{"error": {...}}`` body). With
``--plain-fastapi-errors`` the handlers are left out and FastAPI's defaults answer (``{"detail"}``),
as when the router is mounted on a bare FastAPI app.

Only the engine core is scripted: ``app.state.engine_client`` is a ``ScriptedEngineClient`` with
the shape vLLM's router calls (``get_status()``, ``handle_fault(FaultToleranceRequest)`` returning a
``FaultToleranceResult``, ``check_health()``) and vLLM's behaviour behind it: the status document
holds one entry ``{"id": rank, "status": ...}`` that every status push replaces whole; a command is
rejected unless the engine is ``unhealthy`` ("[FT] Rejecting retry on engine N: status is DEAD");
a rejected or failed command sets ``last_ft_request_id`` / ``ft_error`` on the cached entry, as
vLLM's ``AsyncMPClient.handle_fault`` does; a successful ``retry`` pushes ``healthy``. The router
itself (instruction check, server-made request id, JSON content-type check) is vLLM's code.

Test-only admin routes (loopback clients only, on the peer's own host and port):

  POST /peer/state   {"status": "healthy|diagnosing|unhealthy|dead", "fault_info"?, "mask"?, "extra"?}
                     a status push (the whole entry is replaced)
  POST /peer/script  {"fail_next_retry"?: "reason", "retry_delay_sec"?: s}
  GET  /peer/handled every FaultToleranceRequest handed to the engine client, with its result
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import os
import socket
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any, Literal

import uvicorn
from fastapi import APIRouter, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
from vllm.entrypoints.serve.fault_tolerance.api_router import register_fault_tolerance_api_router
from vllm.entrypoints.serve.instrumentator.health import router as vllm_health_router
from vllm.v1.fault_tolerance.utils import FaultToleranceRequest, FaultToleranceResult

log = logging.getLogger("vllm_peer")

STATUSES = ("healthy", "diagnosing", "unhealthy", "dead")


class ScriptedEngineClient:
    """What vLLM's FT router and /health call on ``app.state.engine_client``, for one engine."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._entry: dict[str, Any] = {"id": rank, "status": "healthy"}
        self.fail_next_retry: str | None = None
        self.retry_delay_sec = 0.0
        self.handled: list[dict[str, Any]] = []

    # -- the EngineClient surface the router uses ------------------------------------------------
    async def get_status(self) -> dict[str, Any]:
        return {"schema_version": 1, "total_engines": 1, "engines": [dict(self._entry)]}

    async def check_health(self) -> None:
        """Liveness only: a faulted engine's API stays up (vLLM raises only when the core died)."""

    async def handle_fault(self, request: FaultToleranceRequest) -> FaultToleranceResult:
        status = self._entry["status"]
        log.info("rank=%d request_id=%s handle_fault instruction=%s params=%s status=%s", self.rank,
                 request.request_id, request.instruction, json.dumps(request.params), status)
        if status != "unhealthy":
            result = FaultToleranceResult(
                request_id=request.request_id, success=False,
                reason=f"[FT] Rejecting {request.instruction} on engine {self.rank}: status is {status.upper()}")
        elif self.fail_next_retry is not None:
            reason, self.fail_next_retry = self.fail_next_retry, None
            result = FaultToleranceResult(request_id=request.request_id, success=False, reason=reason)
        else:
            if self.retry_delay_sec:
                await asyncio.sleep(self.retry_delay_sec)
            self.push("healthy")
            result = FaultToleranceResult(request_id=request.request_id, success=True)
        if not result.success:
            # As vLLM's AsyncMPClient.handle_fault: the cached entry keeps the failure until the next push.
            self._entry["last_ft_request_id"] = result.request_id
            self._entry["ft_error"] = result.reason
            log.warning("rank=%d request_id=%s %s refused: %s", self.rank, request.request_id, request.instruction,
                        result.reason)
        self.handled.append({"instruction": request.instruction, "params": request.params,
                             "request_id": request.request_id, "success": result.success, "reason": result.reason})
        return result

    # -- the engine core's side, scripted ---------------------------------------------------------
    def push(self, status: str, fault_info: str | None = None, mask: list[int] | None = None,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """A status push from the engine core: the whole entry is replaced."""
        entry: dict[str, Any] = {"id": self.rank, "status": status}
        if status == "unhealthy":
            entry["fault_info"] = fault_info if fault_info is not None else "RuntimeError"
        elif fault_info is not None:
            entry["fault_info"] = fault_info
        if mask is not None:
            entry["mask"] = mask
        entry.update(extra or {})
        self._entry = entry
        log.info("rank=%d status push %s", self.rank, json.dumps(entry))
        return dict(entry)


class StatePush(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["healthy", "diagnosing", "unhealthy", "dead"]
    fault_info: str | None = None
    mask: list[int] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fail_next_retry: str | None = None
    retry_delay_sec: float = Field(default=0.0, ge=0.0, le=60.0)


def _admin_router(client: ScriptedEngineClient) -> APIRouter:
    router = APIRouter(prefix="/peer")

    def loopback_only(request: Request) -> None:
        host = request.client.host if request.client else ""
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
        if not ok:
            raise HTTPException(403, f"admin routes answer loopback clients only, not {host!r}")

    @router.post("/state")
    async def state(push: StatePush, request: Request) -> dict[str, Any]:
        loopback_only(request)
        return client.push(push.status, push.fault_info, push.mask, push.extra)

    @router.post("/script")
    async def script(body: Script, request: Request) -> dict[str, Any]:
        loopback_only(request)
        client.fail_next_retry = body.fail_next_retry
        client.retry_delay_sec = body.retry_delay_sec
        return {"fail_next_retry": client.fail_next_retry, "retry_delay_sec": client.retry_delay_sec}

    @router.get("/handled")
    async def handled(request: Request) -> list[dict[str, Any]]:
        loopback_only(request)
        return client.handled

    return router


def build_app(client: ScriptedEngineClient, *, vllm_errors: bool = True) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    # What vLLM's handlers read from the server's parsed CLI arguments.
    app.state.args = Namespace(log_error_stack=False)
    app.state.engine_client = client
    register_fault_tolerance_api_router(app)
    app.include_router(vllm_health_router)
    app.include_router(_admin_router(client))
    if vllm_errors:
        init_exception_handler(app)
    return app


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"vllm-peer: cannot bind {host}:{port}: {exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="vllm-peer", description=__doc__.splitlines()[0])
    p.add_argument("--dp-rank", type=int, required=True, help="global DP rank = the entry's id (external LB)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port (see --ready-file)")
    p.add_argument("--ready-file", help="JSON {port, pid, dp_rank} written once serving")
    p.add_argument("--plain-fastapi-errors", action="store_true",
                   help="leave vLLM's exception handlers out (FastAPI's default error bodies)")
    # Engine flags a NodeManager may pass (--dp-size, --dp-master-ip, ...) are accepted and ignored:
    # nothing here forms a DP group.
    return p.parse_known_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    if args.dp_rank < 0:
        raise SystemExit(f"vllm-peer: --dp-rank {args.dp_rank} is negative")
    if not ipaddress.ip_address(args.host).is_loopback:
        raise SystemExit(f"vllm-peer: --host {args.host} is not a loopback address (test peer)")
    client = ScriptedEngineClient(args.dp_rank)
    app = build_app(client, vllm_errors=not args.plain_fastapi_errors)
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.02)
    if serving.done():
        await serving
        return
    log.info("rank=%d serving vLLM's FT router on %s:%d pid=%d", args.dp_rank, args.host, port, os.getpid())
    if args.ready_file:
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(json.dumps({"port": port, "pid": os.getpid(), "dp_rank": args.dp_rank}))
        tmp.replace(args.ready_file)
    await serving


def check_imports() -> str:
    """One line naming what the peer serves with (the side venv's install check)."""
    import fastapi
    import vllm

    return (f"vllm {vllm.__version__} (fault-tolerance router {register_fault_tolerance_api_router.__module__}), "
            f"fastapi {fastapi.__version__}, uvicorn {uvicorn.__version__}")


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == ["--check-imports"]:
        print(check_imports())
        return 0
    args, ignored = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ignored:
        log.info("rank=%d ignoring engine flags %s", args.dp_rank, " ".join(ignored))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
