"""Transport security of every Motor process: the one `security` switch, roles from certificates.

With a `security` block (`motor.common.config.tls.SecurityConfig`: ca_file, cert_file, key_file) a
process serves gRPC with mTLS (client certificate required, signed by ca_file) and role
authorization (`motor.common.authz`), calls its peers with its own certificate, serves its HTTP
pages over TLS and talks TLS with a client certificate to etcd. Without it everything is plaintext,
which is for the local demo only, and the process says so in one log line.

Roles: each certificate carries exactly one SAN URI ``spiffe://motor/<role>``, role one of
controller, nodemanager, coordinator, operator, monitor. Identity (which pod) stays in the DNS/IP SANs that
hostname verification checks; the role says what the holder may call.
"""

from __future__ import annotations

import enum
import functools
import logging
import ssl

from cryptography import x509
from cryptography.x509.oid import ExtensionOID

from motor.common.config.listeners import ServerConfig
from motor.common.config.tls import ClientTlsConfig, SecurityConfig, TlsConfig

log = logging.getLogger(__name__)

SPIFFE_TRUST_DOMAIN = "motor"
ROLE_URI_PREFIX = f"spiffe://{SPIFFE_TRUST_DOMAIN}/"


class Role(str, enum.Enum):
    CONTROLLER = "controller"
    NODEMANAGER = "nodemanager"
    COORDINATOR = "coordinator"
    OPERATOR = "operator"
    # Read-only: metrics, status, timeline and its watch (Prometheus, dashboards); no mutation.
    MONITOR = "monitor"


# What a caller without a usable role is called in refusals and logs.
NO_ROLE = "none"


def role_uri(role: Role) -> str:
    return ROLE_URI_PREFIX + role.value


def _roles_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    except x509.ExtensionNotFound:
        return []
    return [uri.removeprefix(ROLE_URI_PREFIX) for uri in san.get_values_for_type(x509.UniformResourceIdentifier)
            if uri.startswith(ROLE_URI_PREFIX)]


def role_of_certificate(cert: x509.Certificate) -> str:
    """The certificate's role name, or NO_ROLE when it has none, several, or an unknown one
    (a certificate is never given the benefit of the doubt)."""
    roles = _roles_of(cert)
    if len(roles) != 1 or roles[0] not in {r.value for r in Role}:
        return NO_ROLE
    return roles[0]


@functools.lru_cache(maxsize=256)
def role_of_pem(pem: bytes) -> str:
    try:
        return role_of_certificate(x509.load_pem_x509_certificate(pem))
    except ValueError:
        return NO_ROLE


@functools.lru_cache(maxsize=256)
def role_of_der(der: bytes) -> str:
    try:
        return role_of_certificate(x509.load_der_x509_certificate(der))
    except ValueError:
        return NO_ROLE


# -- what the switch derives -------------------------------------------------------------------
def server_config(server: ServerConfig, security: SecurityConfig | None) -> ServerConfig:
    """The gRPC server config with mTLS from `security` (client certificates of its CA required)."""
    if security is None:
        return server
    tls = TlsConfig(cert_file=security.cert_file, key_file=security.key_file, client_ca_file=security.ca_file,
                    require_client_auth=True)
    return server.model_copy(update={"tls": tls})


def client_tls(explicit: ClientTlsConfig | None, security: SecurityConfig | None) -> ClientTlsConfig | None:
    """The TLS of this process's gRPC (and etcd) clients: explicit config, else from `security`."""
    if explicit is not None or security is None:
        return explicit
    return ClientTlsConfig(ca_file=security.ca_file, cert_file=security.cert_file, key_file=security.key_file)


def roles_enforced(server: ServerConfig) -> bool:
    """Roles are checked whenever client certificates are required (there is then a role to check)."""
    return server.tls is not None and server.tls.require_client_auth


def http_server_context(security: SecurityConfig, *, require_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(security.cert_file, security.key_file)
    ctx.load_verify_locations(cafile=str(security.ca_file))
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
    return ctx


def http_client_context(ca_file, cert_file=None, key_file=None) -> ssl.SSLContext:
    """Client side of an HTTPS call to a Motor page (hostname checked against the server's SANs)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def log_transport(label: str, security: SecurityConfig | None, server: ServerConfig) -> None:
    """The one line that says how this process's contracts are protected."""
    if security is not None:
        log.info("%s security: mTLS on every gRPC server and client, roles from spiffe://motor/<role>, TLS on "
                 "HTTP pages and etcd (ca=%s cert=%s)", label, security.ca_file, security.cert_file)
    elif server.tls is None:
        log.warning("%s security: PLAINTEXT gRPC and HTTP, no authorization (no `security` block): for the "
                    "local demo only", label)
    else:
        log.info("%s security: TLS from server.tls (client certificates %s)", label,
                 "required, roles enforced" if server.tls.require_client_auth else "not required, no roles")
