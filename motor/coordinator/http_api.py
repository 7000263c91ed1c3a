"""The Coordinator's HTTP front: OpenAI-compatible inference plus two read-only pages.

Routes:
  POST /v1/completions, POST /v1/chat/completions  forwarded by InferenceProxy (streaming or not)
  GET  /v1/models                                  union of the published models (OpenAI list)
  GET  /v1/models/{model}                          one of them, or 404
  GET  /health                                     200 while the process serves
  GET  /coordinator/instances                      JSON view of what is published, for humans
  GET  /metrics                                    Prometheus metrics (the proxy's registry)

The last two list engine addresses: with `security` they need a client certificate of an allowed
role. The inference routes pass `motor.coordinator.admission` (API keys, the concurrency limit).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from motor.common.authz import METRICS_ROLES, http_role_middleware
from motor.common.config.listeners import HttpListenConfig
from motor.common.http_site import start_site
from motor.common.metrics_http import add_metrics_route
from motor.coordinator.admission import ADMIN_PATHS, ApiKeys, ConcurrencyLimit, admission_middleware
from motor.coordinator.openai_format import openai_error
from motor.coordinator.proxy import InferenceProxy
from motor.coordinator.routing import RoutingTable, TableSnapshot

log = logging.getLogger(__name__)

# Prompts can be long; the engines have their own limits.
MAX_REQUEST_BODY_BYTES = 64 * 1024 * 1024


def snapshot_json(snapshot: TableSnapshot) -> dict[str, Any]:
    return {
        "revision": snapshot.revision,
        "instances": [
            {
                "id": view.spec.id,
                "model": view.spec.model,
                "role": view.spec.role,
                "dp_size": view.spec.dp_size,
                "paused": view.paused,
                "outstanding_requests": sum(e.outstanding for e in view.endpoints),
                "endpoints": [
                    {
                        "id": e.spec.id,
                        "ip": e.spec.ip,
                        "business_port": e.spec.business_port,
                        "mgmt_port": e.spec.mgmt_port,
                        "headless": e.spec.headless,
                        "instance_route": None if e.spec.instance_route is None else {
                            "host": e.spec.instance_route.host, "port": e.spec.instance_route.port},
                        "outstanding_requests": e.outstanding,
                        "cooling_down": e.cooling_down,
                    }
                    for e in view.endpoints
                ],
            }
            for view in snapshot.instances
        ],
    }


def admin_role_middleware():
    """The role check of the admin pages only (inference and /health stay as they are)."""
    role_check = http_role_middleware(METRICS_ROLES, "coordinator")

    @web.middleware
    async def admin_only(request: web.Request, handler):
        if request.path in ADMIN_PATHS:
            return await role_check(request, handler)
        return await handler(request)

    return admin_only


def build_app(table: RoutingTable, proxy: InferenceProxy, clock: Callable[[], float] = time.monotonic, *,
              limit: ConcurrencyLimit | None = None, api_keys: ApiKeys | None = None,
              admin_roles: bool = False) -> web.Application:
    """`admin_roles`: the admin pages need a client certificate of an allowed role (with `security`)."""
    middlewares = [admin_role_middleware()] if admin_roles else []
    limit = limit or ConcurrencyLimit(1024, 1)
    middlewares.append(admission_middleware(
        limit, api_keys, lambda reason: proxy.metrics.admission_refusals.labels(reason).inc()))
    app = web.Application(client_max_size=MAX_REQUEST_BODY_BYTES, middlewares=middlewares)
    started = int(time.time())

    async def completions(request: web.Request) -> web.StreamResponse:
        return await proxy.handle(request, "/v1/completions")

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await proxy.handle(request, "/v1/chat/completions")

    def model_card(model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": started, "owned_by": "motor"}

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [model_card(m) for m in table.models()]})

    async def model(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name in table.models():
            return web.json_response(model_card(name))
        return openai_error(404, f"The model `{name}` does not exist.", "invalid_request_error", "model_not_found",
                            param="model")

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200, text="ok")

    async def instances(_: web.Request) -> web.Response:
        return web.json_response(snapshot_json(table.snapshot(clock())))

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", model)
    app.router.add_get("/health", health)
    app.router.add_get("/coordinator/instances", instances)
    add_metrics_route(app, proxy.metrics.registry)
    return app


class HttpFront:
    """Runs the app; start() returns the bound port. A client that disconnects cancels its handler
    (and so its upstream request)."""

    def __init__(self, config: HttpListenConfig, app: web.Application, shutdown_timeout_sec: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._config = config
        self._ssl_context = ssl_context
        self._app = app
        self._shutdown_timeout_sec = shutdown_timeout_sec
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> int:
        runner = web.AppRunner(self._app, access_log=None, handler_cancellation=True,
                               shutdown_timeout=self._shutdown_timeout_sec)
        self.port = await start_site(runner, self._config.host, self._config.port, self._ssl_context,
                                     who="coordinator", listener="HTTP server")
        self._runner = runner
        log.info("coordinator HTTP serving on %s://%s:%d", "https" if self._ssl_context else "http",
                 self._config.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
            log.info("coordinator HTTP server stopped")
