"""motor-controller: assembles instances, ingests faults, runs recovery strategies."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gen.motor.v1 import controller_pb2_grpc
from motor.common.authz import STATUS_PAGE_ROLES, http_role_middleware
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.cert_reload import stop_reloaders, watch_security
from motor.common.security import client_tls, http_server_context, log_transport, server_config
from motor.common.service import base_arg_parser, config_from_args, run_service
from motor.controller.clients import ControllerPeers
from motor.controller.config import ControllerConfig
from motor.controller.console.app import add_console_routes
from motor.controller.console.feed import ConsoleFeed, ConsoleSource
from motor.controller.core import ControllerCore
from motor.controller.fencing import Leadership
from motor.controller.metrics import ControllerMetrics
from motor.controller.persistence import open_runtime_store
from motor.controller.replica import ControllerReplica
from motor.controller.servicer import ControllerServicer
from motor.controller.status import message_json, status_app

log = logging.getLogger(__name__)


class ControllerService:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.core: ControllerCore | None = None
        self._replica: ControllerReplica | None = None
        self._grpc: GrpcServer | None = None
        self._servicer: ControllerServicer | None = None
        self._http: web.AppRunner | None = None
        self._reloaders: list = []

    async def start(self) -> dict[str, Any]:
        security = self.config.security
        log_transport("controller", security, self.config.server)
        # Election needs etcd (election_enabled says so), where every write is fenced by the term.
        election = self.config.election_enabled
        election_config = self.config.leader_election
        metrics = ControllerMetrics()
        leadership = Leadership(election_enabled=election,
                                replica_id=election_config.replica_id or f"{socket.gethostname()}-{os.getpid()}",
                                on_refused=metrics.not_leader)
        store = open_runtime_store(self.config.store, client_tls(self.config.store.tls, security),
                                   leadership if election else None)
        replica = self._replica = ControllerReplica(self.config, leadership, store,
                                                    ControllerPeers.from_config(self.config, leadership),
                                                    metrics=metrics)
        core = self.core = replica.core
        if not election:
            await replica.start_alone()
        servicer = self._servicer = ControllerServicer(core)
        self._grpc = GrpcServer(
            server_config(self.config.server, security),
            [ServiceBinding("motor.v1.Controller", lambda s: controller_pb2_grpc.add_ControllerServicer_to_server(servicer, s))],
            "controller",
            registry=core.metrics.registry,
        )
        grpc_port = await self._grpc.start()
        leadership.advertise(election_config.advertise_address or _advertised(self.config.server.host, grpc_port))
        if election:
            # Replicas serve (read-only) before they campaign: they answer who leads from the start.
            await replica.campaign()
        leadership_json = lambda: message_json(servicer.leadership_proto())  # noqa: E731
        app = status_app(core.status_runtimes, lambda iid: core.timelines.transactions(iid), core.scale_down_enabled,
                         core.metrics.registry, leadership=leadership_json, publishers=core.pusher.health)
        # The operator console (/ui) on the same listener: the same TLS and roles as the status pages.
        add_console_routes(app, ConsoleFeed(ConsoleSource.of(core, leadership_json)))
        ssl_context = None
        if security is not None:
            # HTTPS with a client certificate of an allowed role on every page of this port.
            app.middlewares.append(http_role_middleware(STATUS_PAGE_ROLES, "controller"))
            ssl_context = http_server_context(security, require_client_cert=True)
        # The expiry gauge of this replica's certificates, and its HTTPS pages following rotated files.
        self._reloaders = watch_security(security, core.metrics.registry, "controller status HTTP", [ssl_context])
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, self.config.status_http.host, self.config.status_http.port,
                           ssl_context=ssl_context)
        await site.start()
        http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        scheme = "https" if ssl_context else "http"
        log.info("controller status page on %s://%s:%d/controller/fault_tolerance/status, console on %s://%s:%d/ui/",
                 scheme, self.config.status_http.host, http_port, scheme, self.config.status_http.host, http_port)
        return {"grpc_port": grpc_port, "http_port": http_port, "replica_id": leadership.replica_id}

    async def stop(self) -> None:
        if self._replica is not None:
            # Resign before going deaf: a standby takes over while this one drains its calls.
            await self._replica.resign()
        if self._servicer is not None:
            ended = await self._servicer.end_heartbeat_streams(
                f"controller {self._servicer.core.leadership.replica_id} is stopping")
            log.info("controller stopping: %d heartbeat streams ended", ended)
        if self._grpc is not None:
            await self._grpc.stop()
        if self._http is not None:
            await self._http.cleanup()
        await stop_reloaders(self._reloaders)
        if self._replica is not None:
            await self._replica.stop()


def _advertised(host: str, port: int) -> str:
    """host:port others reach this replica at: the server's host, or this machine's name for a wildcard."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    # uvloop where installed: its loop takes about a tenth less CPU per heartbeat at fleet size.
    parser = base_arg_parser("motor-controller", __doc__ or "", default_event_loop="auto")
    parser.add_argument("--etcd", action="append", help="etcd endpoint host:port (overrides store.etcd_endpoints)")

    def build(args: argparse.Namespace) -> ControllerService:
        extra = [("store.etcd_endpoints", args.etcd)] if args.etcd else []
        return ControllerService(config_from_args(ControllerConfig, args, extra))

    return run_service("motor-controller", build, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
