"""Prometheus exposition over aiohttp: the `GET /metrics` route every Motor service serves, and a small
listener for a service that has no HTTP server of its own (the NodeManager).

Each service exports from a `CollectorRegistry` it owns, never the process-global default one, so
several services (or tests) in one process never collide on metric names.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from motor.common.http_site import start_site

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"

# `*_created` series double every counter and histogram, and no dashboard or rule of Motor reads
# them; the setting is process-wide, and every Motor service exports through this module.
prometheus_client.disable_created_metrics()


def metrics_handler(registry: CollectorRegistry):
    async def handle(_: web.Request) -> web.Response:
        # Text format 0.0.4: what every Prometheus version and promtool read.
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    return handle


def add_metrics_route(app: web.Application, registry: CollectorRegistry) -> None:
    app.router.add_get(METRICS_PATH, metrics_handler(registry))


class MetricsListener:
    """`GET /metrics` on a host:port of its own (port 0 picks a free one); start() returns the port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, what: str,
                 ssl_context: ssl.SSLContext | None = None, middlewares: Sequence[Any] = ()) -> None:
        """`ssl_context` and `middlewares`: HTTPS and role checks under `security`."""
        self._ssl_context = ssl_context
        self._middlewares = list(middlewares)
        self._registry = registry
        self._host = host
        self._port = port
        self._what = what
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> int:
        app = web.Application(middlewares=self._middlewares, client_max_size=64 * 1024)
        add_metrics_route(app, self._registry)
        runner = web.AppRunner(app, access_log=None)
        self.port = await start_site(runner, self._host, self._port, self._ssl_context, who=self._what,
                                     listener="the metrics listener")
        self._runner = runner
        log.info("%s metrics on %s://%s:%d%s", self._what, "https" if self._ssl_context else "http", self._host,
                 self.port, METRICS_PATH)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
