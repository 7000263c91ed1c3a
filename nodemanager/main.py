"""motor-nodemanager: the per-pod agent that supervises local engines and proxies their FT API.

Serves motor.v1.NodeManager and motor.v1.NodeManagerFaultTolerance (health + reflection), launches
the local engines, registers with the Controller once they are ready and heartbeats. Exit status:
0 after SIGTERM/SIGINT or StopPod, 3 when every engine died with exit_when_all_engines_dead, 2 on a
refused configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gen.motor.v1 import node_manager_pb2_grpc
from motor.common.authz import METRICS_ROLES, http_role_middleware
from motor.common.cert_reload import stop_reloaders, watch_security
from motor.common.grpc_server import GrpcServer, ServiceBinding
from motor.common.metrics_http import MetricsListener
from motor.common.security import http_server_context, log_transport, server_config
from motor.common.service import base_arg_parser, config_from_args, run_service
from motor.common.term_fence import TermFenceInterceptor
from nodemanager.agent import NodeManagerAgent
from nodemanager.config import NodeManagerConfig
from nodemanager.ft_service import FtServicer
from nodemanager.lifecycle_service import LifecycleServicer

log = logging.getLogger("nodemanager.main")

# Lets the answer of StopPod leave before the process starts to stop.
_EXIT_DELAY_SEC = 0.2
# Beyond the server's own shutdown grace, how long its stop may take before the pod stops anyway.
_SERVER_STOP_MARGIN_SEC = 5.0

ExitRequest = Callable[[int, str], None]

# Every call of the Controller that changes something (DescribePod, a read, is left open).
FENCED_METHODS = (
    *(f"/motor.v1.NodeManagerFaultTolerance/{m}" for m in ("Guard", "Status", "Apply", "Finalize")),
    *(f"/motor.v1.NodeManager/{m}" for m in ("StartEngines", "StopEngines", "RelaunchEngines", "StopPod")),
)


def _signal_self(code: int, reason: str) -> None:
    log.warning("exiting with status %d: %s", code, reason)
    os.kill(os.getpid(), signal.SIGTERM)


class NodeManagerService:
    """The service object run_service drives: start() → {"grpc_port": ...}, stop()."""

    def __init__(self, config: NodeManagerConfig, exit_request: ExitRequest | None = None) -> None:
        self.config = config
        self.exit_code: int | None = None
        self._exit_request = exit_request or _signal_self
        self.agent = NodeManagerAgent(config, exit_hook=self._request_exit)
        security = config.security
        self._ssl_context = http_server_context(security, require_client_cert=True) if security else None
        self._reloaders: list = []
        self._metrics = MetricsListener(
            self.agent.metrics.registry, config.metrics_http.host, config.metrics_http.port,
            f"nodemanager pod={config.pod_ip}",
            ssl_context=self._ssl_context,
            middlewares=[http_role_middleware(METRICS_ROLES, "nodemanager")] if security else (),
        )
        ft = FtServicer(self.agent.proxy)
        lifecycle = LifecycleServicer(self.agent)
        self._grpc = GrpcServer(
            server_config(config.server, config.security),
            [
                ServiceBinding(
                    "motor.v1.NodeManager",
                    lambda server: node_manager_pb2_grpc.add_NodeManagerServicer_to_server(lifecycle, server),
                ),
                ServiceBinding(
                    "motor.v1.NodeManagerFaultTolerance",
                    lambda server: node_manager_pb2_grpc.add_NodeManagerFaultToleranceServicer_to_server(ft, server),
                ),
            ],
            f"nodemanager instance={config.instance_id} pod={config.pod_ip}",
            # A deposed Controller leader's FT and lifecycle calls are refused (motor.common.term_fence).
            interceptors=[TermFenceInterceptor(self.agent.term_fence, FENCED_METHODS)],
            registry=self.agent.metrics.registry,
        )

    def _request_exit(self, code: int, reason: str) -> None:
        if self.exit_code is not None:
            return
        self.exit_code = code
        asyncio.get_running_loop().call_later(_EXIT_DELAY_SEC, self._exit_request, code, reason)

    @property
    def grpc_port(self) -> int | None:
        return self._grpc.port

    async def start(self) -> dict[str, Any]:
        log_transport(f"nodemanager pod={self.config.pod_ip}", self.config.security, self.config.server)
        port = await self._grpc.start()
        host = self.config.advertise_host or self.config.server.host
        if host in ("0.0.0.0", "::", ""):
            host = self.config.pod_ip
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        # The expiry gauge of the pod's certificates, and its HTTPS /metrics following rotated files.
        self._reloaders = watch_security(self.config.security, self.agent.metrics.registry,
                                         f"nodemanager pod={self.config.pod_ip} HTTP", [self._ssl_context])
        metrics_port = await self._metrics.start()
        await self.agent.start(address)
        return {"grpc_port": port, "log_dir": str(self.agent.log_dir), "metrics_port": metrics_port}

    async def stop(self) -> None:
        """The gRPC server first (no new work), then the pod and its engines, which stop even when the
        server's stop fails or overruns its bound (logged)."""
        try:
            async with asyncio.timeout(self.config.server.shutdown_grace_sec + _SERVER_STOP_MARGIN_SEC):
                await self._grpc.stop()
        except Exception:  # noqa: BLE001 - whatever it was, the engines must not outlive the NodeManager
            log.exception("nodemanager pod=%s gRPC server stop failed; stopping the pod anyway", self.config.pod_ip)
        await self.agent.stop()
        await self._metrics.stop()
        await stop_reloaders(self._reloaders)


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arg_parser("motor-nodemanager", __doc__ or "")
    built: list[NodeManagerService] = []

    def build(args: argparse.Namespace) -> NodeManagerService:
        service = NodeManagerService(config_from_args(NodeManagerConfig, args))
        built.append(service)
        return service

    rc = run_service("motor-nodemanager", build, parser, argv)
    if rc == 0 and built and built[0].exit_code:
        return built[0].exit_code
    return rc


if __name__ == "__main__":
    sys.exit(main())
