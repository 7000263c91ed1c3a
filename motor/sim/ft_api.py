"""The engine fault-tolerance REST API (DESIGN.md §3), served under ``--ft-api-prefix``.

``GET {prefix}/status`` -> ``{"schema_version": 1, "total_engines": 1, "engines": [entry]}``;
``POST {prefix}/apply`` -> 202 ``{"message", "request_id"}`` once the body is well-formed (the
outcome is only visible in status), 400 ``{"detail": "..."}`` otherwise -- and, in the vllm
dialect, also when the rank is not ``unhealthy`` (the entry then names the request and the error),
and for a refused ``scale_up`` in every dialect (the status untouched).
Any Content-Type is accepted; the body must be JSON.
"""

from __future__ import annotations

import logging

from aiohttp import web

from motor.sim.apply_body import ApplyBodyError, parse_apply_body
from motor.sim.engine import SimEngine

log = logging.getLogger("motor.sim.ft_api")


def add_ft_routes(app: web.Application, engine: SimEngine, prefix: str) -> None:
    rank = engine.cfg.dp_rank

    async def status(_: web.Request) -> web.Response:
        await engine.injections.wait_status_released()
        return web.json_response(engine.status_doc())

    async def apply(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            req = parse_apply_body(raw)
        except ApplyBodyError as exc:
            log.warning("rank=%d malformed apply body rejected: %s", rank, exc)
            return web.json_response({"detail": str(exc)}, status=400)
        engine.journal_apply(req)
        refused = engine.apply(req)
        if refused is not None:
            return web.json_response({"detail": refused}, status=400)
        return web.json_response(
            {"message": f"instruction {req.instruction.value} accepted; poll {prefix}/status for the outcome",
             "request_id": req.request_id},
            status=202,
        )

    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
