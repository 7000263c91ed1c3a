"""Roles from certificates, the authorization table, the development PKI and the `security` switch."""

from __future__ import annotations

import datetime
import io
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gen.motor.v1 import controller_pb2, coordinator_pb2, node_manager_pb2
from motor.cli.motorctl import run as motorctl
from motor.common.authz import METHOD_ROLES, METRICS_ROLES, OPEN_SERVICES, READ_ONLY_ROLES, STATUS_PAGE_ROLES, denial
from motor.common.config.listeners import ServerConfig
from motor.common.config.tls import SecurityConfig
from motor.common.config.loader import ConfigError, build_config
from motor.common.pki import ETCD, PkiError, create_dev_pki
from motor.common.security import (
    NO_ROLE,
    Role,
    client_tls,
    role_of_certificate,
    role_of_pem,
    roles_enforced,
    server_config,
    set_trust_domain,
)
from motor.controller.config import ControllerConfig

SERVICES = [
    controller_pb2.DESCRIPTOR.services_by_name["Controller"],
    coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"],
    node_manager_pb2.DESCRIPTOR.services_by_name["NodeManager"],
    node_manager_pb2.DESCRIPTOR.services_by_name["NodeManagerFaultTolerance"],
]
ALL_METHODS = {f"/{s.full_name}/{m.name}" for s in SERVICES for m in s.methods}


def _cert(uris: list[str]) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "t")])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=1)))
    if uris:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]), critical=False)
    return builder.sign(key, hashes.SHA256())


# -- roles from certificates ---------------------------------------------------------------------
@pytest.mark.parametrize("role", list(Role))
def test_one_role_uri_gives_the_role(role: Role) -> None:
    assert role_of_certificate(_cert([f"spiffe://motor/{role.value}"])) == role.value


@pytest.mark.parametrize("uris", [
    [],  # no SAN at all
    ["spiffe://motor/admin"],  # not a Motor role
    ["spiffe://other/controller"],  # another trust domain
    ["spiffe://motor/controller", "spiffe://motor/operator"],  # ambiguous: never the benefit of the doubt
    ["https://motor/controller"],
    ["spiffe://motor/controller/extra"],
])
def test_no_or_ambiguous_role_is_no_role(uris: list[str]) -> None:
    assert role_of_certificate(_cert(uris)) == NO_ROLE


def test_unparsable_pem_is_no_role() -> None:
    assert role_of_pem(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n") == NO_ROLE


# -- the authorization table ---------------------------------------------------------------------
def test_every_method_of_every_motor_service_is_in_the_table_and_nothing_else() -> None:
    assert set(METHOD_ROLES) == ALL_METHODS


def _allowed(method: str) -> set[str]:
    return {r.value for r in Role if denial(method, r.value) is None}


def test_only_the_controller_drives_nodemanagers_and_publishes() -> None:
    for service in ("NodeManagerFaultTolerance", "NodeManager"):
        for m in node_manager_pb2.DESCRIPTOR.services_by_name[service].methods:
            method = f"/motor.v1.{service}/{m.name}"
            if m.name == "DescribePod":
                assert _allowed(method) == {"controller", "operator"}
            else:
                assert _allowed(method) == {"controller"}, method
    assert _allowed("/motor.v1.Coordinator/Refresh") == {"controller"}
    assert _allowed("/motor.v1.Coordinator/ListInstances") == {"controller", "operator"}


def test_only_nodemanagers_register_heartbeat_and_report_software_faults() -> None:
    for name in ("Register", "Heartbeat", "ReportSoftwareFault"):
        assert _allowed(f"/motor.v1.Controller/{name}") == {"nodemanager"}


def test_operators_read_status_and_report_hardware_faults() -> None:
    for name in ("GetFaultToleranceStatus", "WatchFaultToleranceStatus", "GetTimeline"):
        assert _allowed(f"/motor.v1.Controller/{name}") == {"operator", "controller", "monitor"}
    assert _allowed("/motor.v1.Controller/ReportHardwareFault") == {"operator", "controller"}


def test_the_monitor_only_reads() -> None:
    reads = {f"/motor.v1.Controller/{n}" for n in ("GetFaultToleranceStatus", "WatchFaultToleranceStatus", "GetTimeline")}
    assert {m for m in ALL_METHODS if denial(m, "monitor") is None} == reads
    assert READ_ONLY_ROLES == {Role.MONITOR}
    assert Role.MONITOR in STATUS_PAGE_ROLES and Role.MONITOR in METRICS_ROLES


def test_refusal_names_method_and_role_and_unknown_methods_are_refused_to_all() -> None:
    message = denial("/motor.v1.Coordinator/Refresh", "operator")
    assert message == "/motor.v1.Coordinator/Refresh is not allowed for role operator (allowed: controller)"
    assert "role none" in denial("/motor.v1.Controller/Register", NO_ROLE)
    for role in [*(r.value for r in Role), NO_ROLE]:
        assert "not in the authorization table" in denial("/motor.v1.Controller/DropEverything", role)


def test_health_and_reflection_are_open() -> None:
    assert OPEN_SERVICES == {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                             "grpc.reflection.v1.ServerReflection"}
    assert denial("/grpc.health.v1.Health/Check", NO_ROLE) is None
    assert denial("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", NO_ROLE) is None


# -- the development PKI -------------------------------------------------------------------------
def test_pki_has_one_certificate_per_role_signed_by_the_ca_with_private_keys(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1", "127.0.0.2"])
    assert stat.S_IMODE(pki.directory.stat().st_mode) == 0o700
    ca = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    for name in [*Role, ETCD]:
        cert = x509.load_pem_x509_certificate(pki.cert_file(name).read_bytes())
        cert.verify_directly_issued_by(ca)
        assert stat.S_IMODE(pki.key_file(name).stat().st_mode) == 0o600
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "127.0.0.2"}
        assert san.get_values_for_type(x509.DNSName) == ["localhost"]
        assert role_of_certificate(cert) == (name.value if isinstance(name, Role) else NO_ROLE)
    assert stat.S_IMODE((pki.directory / "ca.key").stat().st_mode) == 0o600


def test_pki_refuses_to_overwrite_and_bad_hosts(tmp_path: Path) -> None:
    create_dev_pki(tmp_path)
    with pytest.raises(PkiError, match="ca.crt exists"):
        create_dev_pki(tmp_path)
    create_dev_pki(tmp_path, force=True)
    with pytest.raises(PkiError, match="'bad host'"):
        create_dev_pki(tmp_path / "x", ["bad host"])
    with pytest.raises(PkiError, match="days=0"):
        create_dev_pki(tmp_path / "y", days=0)


def test_motorctl_certs_init(tmp_path: Path) -> None:
    out = io.StringIO()
    assert motorctl(["certs", "init", str(tmp_path / "c"), "--host", "127.0.0.9"], out=out) == 0
    written = out.getvalue().split()
    assert str(tmp_path / "c" / "operator.key") in written and len(written) == 2 * (len(Role) + 2)
    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "operator.crt").read_bytes())
    assert role_of_certificate(cert) == "operator"
    with pytest.raises(SystemExit, match="exists"):
        motorctl(["certs", "init", str(tmp_path / "c")], out=io.StringIO())


# -- the security switch -------------------------------------------------------------------------
def test_security_block_derives_mtls_server_and_client(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path)
    cfg = build_config(ControllerConfig, {"security": pki.security(Role.CONTROLLER)})
    server = server_config(cfg.server, cfg.security)
    assert server.tls is not None and server.tls.require_client_auth and server.tls.client_ca_file == pki.ca_file
    assert roles_enforced(server) and not roles_enforced(ServerConfig())
    tls = client_tls(cfg.client_tls, cfg.security)
    assert tls is not None and tls.cert_file == pki.cert_file(Role.CONTROLLER)
    assert client_tls(None, None) is None and server_config(ServerConfig(), None).tls is None


def test_security_block_refusals_name_the_key(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path)
    with pytest.raises(ConfigError, match=r"security\.cert_file=.*missing\.crt.*: Path does not point to a file"):
        build_config(ControllerConfig, {"security": {**pki.security(Role.CONTROLLER),
                                                     "cert_file": str(tmp_path / "missing.crt")}})
    with pytest.raises(ConfigError, match="security and client_tls are exclusive"):
        build_config(ControllerConfig, {"security": pki.security(Role.CONTROLLER),
                                        "client_tls": {"ca_file": str(pki.ca_file)}})
    with pytest.raises(ConfigError, match="security and server.tls are exclusive"):
        build_config(ControllerConfig, {"security": pki.security(Role.CONTROLLER), "server": {"tls": {
            "cert_file": str(pki.cert_file(Role.CONTROLLER)), "key_file": str(pki.key_file(Role.CONTROLLER))}}})


def test_the_trust_domain_is_configurable_and_only_its_role_uris_count() -> None:
    theirs = _cert(["spiffe://prod.example.org/operator"])
    assert role_of_certificate(theirs) == "none"
    try:
        set_trust_domain("prod.example.org")
        assert role_of_certificate(theirs) == "operator"
        assert role_of_certificate(_cert(["spiffe://motor/operator"])) == "none"
    finally:
        set_trust_domain("motor")
    with pytest.raises(ValueError, match="trust_domain"):
        SecurityConfig.model_validate({"ca_file": __file__, "cert_file": __file__, "key_file": __file__,
                                       "trust_domain": "Bad/Domain"})


def test_the_documented_role_table_is_the_enforced_one() -> None:
    """docs/security.md's table names every method of METHOD_ROLES with exactly its roles."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text(encoding="utf-8")
    documented: dict[str, frozenset[str]] = {}
    roles_section = text.split("\n## Roles\n", 1)[1].split("\n## ", 1)[0]
    for line in roles_section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not line.startswith("| ") or cells[0] in ("method", "---", "health, reflection"):
            continue
        service, _, methods = cells[0].partition(" ")
        for method in methods.split(","):
            documented[f"/motor.v1.{service}/{method.strip()}"] = frozenset(r.strip() for r in cells[1].split(","))
    enforced = {m: frozenset(r.value for r in roles) for m, roles in METHOD_ROLES.items()}
    assert documented == enforced
