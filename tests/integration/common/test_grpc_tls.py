"""The shared server bootstrap over real sockets: health, reflection, TLS and mTLS from config files."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gen.motor.v1 import coordinator_pb2, coordinator_pb2_grpc
from motor.common.config.listeners import ServerConfig
from motor.common.config.tls import ClientTlsConfig, TlsConfig
from motor.common.grpc_server import GrpcServer, ServiceBinding, open_channel


def _write_cert(tmp: Path, name: str, issuer_key, issuer_name, *, ca: bool) -> tuple[Path, Path, object, x509.Name]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path, key, subject


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca_crt, _, ca_key, ca_name = _write_cert(tmp_path, "ca", None, None, ca=True)
    srv_crt, srv_key, _, _ = _write_cert(tmp_path, "server", ca_key, ca_name, ca=False)
    cli_crt, cli_key, _, _ = _write_cert(tmp_path, "client", ca_key, ca_name, ca=False)
    return {"ca": ca_crt, "srv_crt": srv_crt, "srv_key": srv_key, "cli_crt": cli_crt, "cli_key": cli_key}


def _server(config: ServerConfig) -> GrpcServer:
    servicer = coordinator_pb2_grpc.CoordinatorServicer()
    return GrpcServer(
        config,
        [ServiceBinding("motor.v1.Coordinator", lambda s: coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, s))],
        "test",
    )


async def _health(channel: grpc.aio.Channel, service: str = "motor.v1.Coordinator") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return response.status


async def test_plaintext_server_reports_serving_and_unimplemented_placeholders() -> None:
    server = _server(ServerConfig(host="127.0.0.1", port=0, shutdown_grace_sec=0.5))
    port = await server.start()
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListInstances(coordinator_pb2.ListInstancesRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop()


async def test_mtls_accepts_a_client_certificate_and_refuses_none(pki: dict[str, Path]) -> None:
    tls = TlsConfig(cert_file=pki["srv_crt"], key_file=pki["srv_key"], client_ca_file=pki["ca"], require_client_auth=True)
    server = _server(ServerConfig(host="127.0.0.1", port=0, tls=tls, shutdown_grace_sec=0.5))
    port = await server.start()
    try:
        good = ClientTlsConfig(ca_file=pki["ca"], cert_file=pki["cli_crt"], key_file=pki["cli_key"])
        async with open_channel(f"localhost:{port}", good) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
        anonymous = ClientTlsConfig(ca_file=pki["ca"])
        async with open_channel(f"localhost:{port}", anonymous) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _health(channel)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        async with open_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await _health(channel)
    finally:
        await server.stop()


async def test_tls_without_client_auth_serves_anonymous_clients(pki: dict[str, Path]) -> None:
    tls = TlsConfig(cert_file=pki["srv_crt"], key_file=pki["srv_key"])
    server = _server(ServerConfig(host="127.0.0.1", port=0, tls=tls, shutdown_grace_sec=0.5))
    port = await server.start()
    try:
        async with open_channel(f"localhost:{port}", ClientTlsConfig(ca_file=pki["ca"])) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop()


async def test_bind_failure_names_the_address() -> None:
    first = _server(ServerConfig(host="127.0.0.1", port=0, shutdown_grace_sec=0.5))
    port = await first.start()
    try:
        second = _server(ServerConfig(host="127.0.0.1", port=port))
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            await second.start()
    finally:
        await first.stop()
