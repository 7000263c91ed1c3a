"""motor-coordinator: routes inference to the serving view the Controller publishes.

gRPC `motor.v1.Coordinator` (Refresh / ListInstances, health, reflection) on server.host:port;
OpenAI-compatible HTTP (/v1/completions, /v1/chat/completions, /v1/models, /health,
/coordinator/instances) and Prometheus /metrics on http.host:port. The ready file carries grpc_port and http_port.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
from collections.abc import Sequence
from typing import Any

from gen.motor.v1 import coordinator_pb2_grpc
from motor.coordinator.config import CoordinatorConfig
from motor.common.cert_reload import stop_reloaders, watch_security
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.leader_client import LeaderFollowingClient
from motor.common.security import client_tls, http_server_context, log_transport, read_key_file, server_config
from motor.common.service import base_arg_parser, config_from_args, run_service
from motor.common.term_fence import FileTermStorage, TermFence, TermFenceInterceptor
from motor.coordinator.admission import ApiKeys, ConcurrencyLimit
from motor.coordinator.canary import Canary
from motor.coordinator.controller_sync import CONTROLLER_CALL_TIMEOUT_SEC, ControllerSync
from motor.coordinator.engine_client import EngineClient
from motor.coordinator.http_api import HttpFront, build_app
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.migration_ledger import MigrationLedger
from motor.coordinator.proxy import InferenceProxy
from motor.coordinator.routing import RoutingTable
from motor.coordinator.servicer import CoordinatorServicer

log = logging.getLogger(__name__)

# The methods a deposed Controller leader's call is refused on (motor.common.term_fence): the view it
# publishes and the canaries it sends (a deposed leader acts on no engine).
FENCED_METHODS = ("/motor.v1.Coordinator/Refresh", "/motor.v1.Coordinator/SendCanary")
# A leader's read of what is published: fenced too, and term-less reads (operators) run.
FENCED_READS = ("/motor.v1.Coordinator/ListInstances",)


class CoordinatorService:
    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.table = RoutingTable(cooldown_sec=config.endpoint_cooldown_sec)
        self.engine_client = EngineClient(config.upstream_connect_timeout_sec, config.upstream_timeout_sec)
        self.metrics = CoordinatorMetrics()
        self.metrics.watch_table(self.table)
        ledger = MigrationLedger()
        self.proxy = InferenceProxy(
            self.table, self.engine_client, max_retries=config.max_retries, retry_after_sec=config.retry_after_sec,
            hold_sec=config.hold_when_unavailable_sec, metrics=self.metrics, migration=config.migration,
            ledger=ledger, max_answer_bytes=config.max_engine_answer_bytes,
        )
        management_key = config.management_key or (
            read_key_file(config.management_key_file, "management_key_file") if config.management_key_file else None)
        # A deposed Controller leader's Refresh, SendCanary and ListInstances are refused
        # (motor.common.term_fence); the highest term seen outlives a restart in state_dir.
        self.term_fence = TermFence("coordinator", FileTermStorage(config.state_dir) if config.state_dir else None)
        term_fence = self.term_fence
        self.servicer = CoordinatorServicer(self.table, management_key, ledger=ledger,
                                            canary=Canary(self.table, self.engine_client, self.metrics),
                                            leader_term=lambda: term_fence.term)
        servicer = self.servicer
        self._grpc = GrpcServer(
            server_config(config.server, config.security),
            [
                ServiceBinding(
                    "motor.v1.Coordinator",
                    lambda server: coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, server),
                )
            ],
            "coordinator",
            interceptors=[TermFenceInterceptor(self.term_fence, FENCED_METHODS, FENCED_READS)],
            registry=self.metrics.registry,
        )
        self.controller_sync = ControllerSync(LeaderFollowingClient(
            config.controller_addresses, timeout_sec=CONTROLLER_CALL_TIMEOUT_SEC, tls=client_tls(None, config.security),
            label="coordinator controller client"), self.table) if config.controller_addresses else None
        ssl_context = None
        if config.security is not None:
            ssl_context = http_server_context(config.security,
                                              require_client_cert=config.security.require_client_cert_on_inference)
            if not config.security.require_client_cert_on_inference:
                # Asked for, not required: the admin pages check the role of the one presented.
                ssl_context.verify_mode = ssl.CERT_OPTIONAL
        api_keys = ApiKeys(config.api_key_file) if config.api_key_file else None
        app = build_app(self.table, self.proxy, limit=ConcurrencyLimit(config.max_concurrent_requests,
                                                                       config.retry_after_sec),
                        api_keys=api_keys, admin_roles=config.security is not None)
        self._http = HttpFront(config.http, app, config.server.shutdown_grace_sec, ssl_context=ssl_context)
        self._ssl_context = ssl_context
        self._reloaders: list = []
        self.grpc_port: int | None = None
        self.http_port: int | None = None

    async def start(self) -> dict[str, Any]:
        log_transport("coordinator", self.config.security, self.config.server)
        await self.engine_client.start()
        # The expiry gauge of its certificates, and its HTTPS front following rotated files.
        self._reloaders = watch_security(self.config.security, self.metrics.registry, "coordinator HTTP",
                                         [self._ssl_context])
        self.http_port = await self._http.start()
        self.grpc_port = await self._grpc.start()
        if self.controller_sync is not None:
            # Before it reports ready: the survivors' view from the Controller leader (bounded).
            self.controller_sync.start()
            try:
                await asyncio.wait_for(asyncio.shield(self.controller_sync.synced.wait()),
                                       self.config.controller_sync_timeout_sec)
            except TimeoutError:
                log.warning("no serving view from the Controller leader within %gs; ready anyway, still asking",
                            self.config.controller_sync_timeout_sec)
        log.info("coordinator management key %s; max_retries=%d retry_after_sec=%d endpoint_cooldown_sec=%g",
                 "required" if self.config.management_key or self.config.management_key_file else "off",
                 self.config.max_retries,
                 self.config.retry_after_sec, self.config.endpoint_cooldown_sec)
        m = self.config.migration
        log.info("coordinator re-inference %s (max_migrations_per_request=%d max_carried_length=%d "
                 "carry_token_ids=%s)", "on" if m.enabled else "off", m.max_migrations_per_request,
                 m.max_carried_length, m.carry_token_ids)
        return {"grpc_port": self.grpc_port, "http_port": self.http_port}

    async def stop(self) -> None:
        """Idempotent, and safe after a partial start."""
        if self.controller_sync is not None:
            await self.controller_sync.close()
        await stop_reloaders(self._reloaders)
        self._reloaders = []
        try:
            await self._grpc.stop()
        finally:
            try:
                await self._http.stop()
            finally:
                await self.engine_client.close()


def main(argv: Sequence[str] | None = None) -> int:
    # uvloop where installed: libuv's transports are the leaner hot path of the OpenAI front.
    parser = base_arg_parser("motor-coordinator", __doc__ or "", default_event_loop="auto")
    parser.add_argument("--http-host", help="HTTP bind address (overrides http.host)")
    parser.add_argument("--http-port", type=int, help="HTTP port, 0 for a free one (overrides http.port)")

    def build(args: argparse.Namespace) -> CoordinatorService:
        extra: list[tuple[str, Any]] = []
        if args.http_host is not None:
            extra.append(("http.host", args.http_host))
        if args.http_port is not None:
            extra.append(("http.port", args.http_port))
        return CoordinatorService(config_from_args(CoordinatorConfig, args, extra))

    return run_service("motor-coordinator", build, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
