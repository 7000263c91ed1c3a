"""The grpc.aio server bootstrap shared by every Motor service, and client channels.

Every server registers the standard health service (each service SERVING once started, NOT_SERVING
while shutting down) and server reflection, so `grpcurl -plaintext HOST:PORT list` works, and uses
TLS or mTLS when configured. With client certificates required, the shared role interceptor
(`motor.common.authz`) authorizes every call. Requests above server.max_receive_message_bytes are
refused (RESOURCE_EXHAUSTED) before any handler runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from motor.common.authz import AuthorizationInterceptor
from motor.common.cert_reload import reloading_server_credentials
from motor.common.config.listeners import ServerConfig
from motor.common.config.tls import ClientTlsConfig, TlsConfig
from motor.common.grpc_traffic import TrafficInterceptor
from motor.common.security import roles_enforced

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceBinding:
    """One gRPC service to serve: its full name and the generated add_*_to_server call."""

    full_name: str
    register: Callable[[grpc.aio.Server], None]


def server_credentials(tls: TlsConfig, label: str = "gRPC server") -> grpc.ServerCredentials:
    """The server's TLS, re-read from the files when they change (checked on each handshake)."""
    return reloading_server_credentials(tls.cert_file, tls.key_file, tls.client_ca_file, tls.require_client_auth,
                                        label)


def channel_credentials(tls: ClientTlsConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_file.read_bytes(),
        private_key=tls.key_file.read_bytes() if tls.key_file else None,
        certificate_chain=tls.cert_file.read_bytes() if tls.cert_file else None,
    )


def _channel_options(tls: ClientTlsConfig) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", tls.server_name_override)] if tls.server_name_override else []


# Motor's peers restart (a Coordinator, a Controller replica, a pod): gRPC's default reconnect backoff
# grows to 120 s, so a channel to a peer that was down a while would stay idle long after it is back.
_RECONNECT_OPTIONS: list[tuple[str, int]] = [("grpc.max_reconnect_backoff_ms", 2000)]


def open_channel(address: str, tls: ClientTlsConfig | None = None) -> grpc.aio.Channel:
    """An asyncio channel to a Motor service; plaintext unless client TLS is configured."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=_RECONNECT_OPTIONS)
    return grpc.aio.secure_channel(address, channel_credentials(tls), options=[*_channel_options(tls),
                                                                               *_RECONNECT_OPTIONS])


def open_sync_channel(address: str, tls: ClientTlsConfig | None = None) -> grpc.Channel:
    """A blocking channel (motorctl, the launcher); plaintext unless client TLS is configured."""
    if tls is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, channel_credentials(tls), options=_channel_options(tls))


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcServer:
    """A grpc.aio server with health and reflection; start() returns the bound port."""

    def __init__(self, config: ServerConfig, bindings: Sequence[ServiceBinding], service_label: str,
                 interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                 registry: CollectorRegistry | None = None) -> None:
        """`registry`: where the calls and bytes served are counted (motor.common.grpc_traffic)."""
        self._config = config
        # After the role check (e.g. motor.common.term_fence's leader-term fence).
        self._interceptors = list(interceptors)
        if registry is not None:
            self._interceptors.insert(0, TrafficInterceptor(registry))
        self._bindings = list(bindings)
        self._label = service_label
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._health_server: grpc.aio.Server | None = None
        self.port: int | None = None
        # server.health_port's bound port (plaintext, health only), when configured.
        self.health_port: int | None = None

    async def start(self) -> int:
        # SO_REUSEPORT (grpc's default) would let two servers share a port silently.
        options = [("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", self._config.max_receive_message_bytes)]
        interceptors = [AuthorizationInterceptor()] if roles_enforced(self._config) else []
        server = grpc.aio.server(options=options, interceptors=[*interceptors, *self._interceptors])
        for binding in self._bindings:
            binding.register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [b.full_name for b in self._bindings]
        reflection.enable_server_reflection(
            [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            server,
        )
        address = _bind_address(self._config.host, self._config.port)
        try:
            if self._config.tls is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, server_credentials(self._config.tls, self._label))
        except RuntimeError as exc:
            await server.stop(None)
            raise OSError(f"{self._label}: cannot bind gRPC server to {address}: {exc}") from None
        except BaseException:
            # Unusable credentials: a server object left unstopped is shut down by its finaliser on
            # whatever loop runs then, which breaks grpc.aio for the rest of the process.
            await server.stop(None)
            raise
        await server.start()
        for name in ("", *names):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        self.port = port
        if self._config.health_port is not None:
            await self._start_health_listener(self._config.health_port)
        log.info(
            "%s gRPC serving on %s (tls=%s mtls=%s roles=%s) services=%s",
            self._label,
            _bind_address(self._config.host, port),
            self._config.tls is not None,
            bool(self._config.tls and self._config.tls.require_client_auth),
            "enforced" if interceptors else "off",
            ",".join(names),
        )
        return port

    async def _start_health_listener(self, port: int) -> None:
        """server.health_port: the same health statuses on a plaintext port of their own (Kubernetes
        gRPC probes cannot present a client certificate), and no other service."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        address = _bind_address(self._config.host, port)
        try:
            self.health_port = server.add_insecure_port(address)
        except RuntimeError as exc:
            await server.stop(None)
            await self.stop(0)
            raise OSError(f"{self._label}: cannot bind the gRPC health listener to {address}: {exc}") from None
        await server.start()
        self._health_server = server
        log.info("%s gRPC health (plaintext, grpc.health.v1 only) on %s", self._label,
                 _bind_address(self._config.host, self.health_port))

    async def stop(self, grace_sec: float | None = None) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        await self._health.enter_graceful_shutdown()
        await server.stop(self._config.shutdown_grace_sec if grace_sec is None else grace_sec)
        if self._health_server is not None:
            health_server, self._health_server = self._health_server, None
            await health_server.stop(0)
        log.info("%s gRPC server stopped", self._label)
