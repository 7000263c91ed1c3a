"""server.health_port: the plaintext, health-only gRPC listener the Kubernetes probes use when the main
port requires client certificates (deploy/k8s/overlays/production)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from motor.common.config.listeners import ServerConfig
from motor.common.config.loader import ConfigError, build_config
from motor.common.config.tls import SecurityConfig
from motor.common.grpc_server import GrpcServer
from motor.common.pki import create_dev_pki
from motor.common.security import Role, server_config

pytestmark = pytest.mark.timeout(60)


async def _check(address: str, service: str = "") -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return resp.status


async def test_health_port_answers_plaintext_while_the_main_port_requires_client_certificates(tmp_path) -> None:
    pki = create_dev_pki(tmp_path / "pki", ["127.0.0.1"])
    security = build_config(SecurityConfig, pki.security(Role.CONTROLLER))
    config = server_config(ServerConfig(host="127.0.0.1", port=0, health_port=0), security)
    server = GrpcServer(config, [], "test")
    await server.start()
    try:
        assert server.health_port and server.health_port != server.port
        assert await _check(f"127.0.0.1:{server.health_port}") == health_pb2.HealthCheckResponse.SERVING
        # The main port speaks only mTLS: a plaintext probe there fails.
        with pytest.raises(grpc.aio.AioRpcError):
            await _check(f"127.0.0.1:{server.port}")
        # Nothing but health on the plaintext port (no reflection, no Motor service).
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.health_port}") as channel:
            stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stream:
                    pass
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(0)
    with pytest.raises(grpc.aio.AioRpcError):
        await _check(f"127.0.0.1:{server.health_port}")


async def test_no_health_port_by_default() -> None:
    server = GrpcServer(ServerConfig(host="127.0.0.1", port=0), [], "test")
    await server.start()
    try:
        assert server.health_port is None
        assert await _check(f"127.0.0.1:{server.port}") == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)


def test_health_port_is_a_port() -> None:
    with pytest.raises(ConfigError, match="health_port"):
        build_config(ServerConfig, {"health_port": 70000})
