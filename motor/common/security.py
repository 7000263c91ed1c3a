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
import re
import ssl
from dataclasses import dataclass

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


# The trust domain roles are read in: `security.trust_domain`, set once by the process (server_config).
_role_prefix = ROLE_URI_PREFIX


def set_trust_domain(trust_domain: str) -> None:
    """Roles are read from spiffe://<trust_domain>/<role> from now on (one domain per process)."""
    global _role_prefix
    prefix = f"spiffe://{trust_domain}/"
    if prefix != _role_prefix:
        _role_prefix = prefix
        role_of_pem.cache_clear()
        role_of_der.cache_clear()
        log.info("roles are read from %s<role>", prefix)


def _roles_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    except x509.ExtensionNotFound:
        return []
    # A pod URI is an identity, not a role.
    prefix = _role_prefix
    return [uri.removeprefix(prefix) for uri in san.get_values_for_type(x509.UniformResourceIdentifier)
            if uri.startswith(prefix) and not POD_URI_RE.match(uri)]


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
    set_trust_domain(security.trust_domain)
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


# -- workload identity -------------------------------------------------------------------------
# A NodeManager's certificate says which pod it is: a SPIFFE URI per pod and the pod's IP as IP SAN
# (the role URI above says what it may call; these say for whom it may speak).
POD_URI_RE = re.compile(r"^spiffe://(?P<domain>[a-z0-9._-]+)/ns/(?P<ns>[^/]+)/pod/(?P<pod>[^/]+)$")


def pod_uri(trust_domain: str, namespace: str, pod: str) -> str:
    return f"spiffe://{trust_domain}/ns/{namespace}/pod/{pod}"


@dataclass(frozen=True)
class PeerIdentity:
    """Who a caller's certificate says it is: its role, its pod URIs (any trust domain), its IP and
    DNS SANs. `pod_uri_in(domain)` is the one identity the Controller binds a pod to."""

    role: str
    pod_uris: tuple[str, ...] = ()
    ips: frozenset[str] = frozenset()
    dns_names: frozenset[str] = frozenset()

    def pod_uri_in(self, trust_domain: str) -> str | None:
        """The certificate's pod URI in `trust_domain`; None when it has none or several (no
        benefit of the doubt)."""
        mine = [u for u in self.pod_uris if (m := POD_URI_RE.match(u)) and m["domain"] == trust_domain]
        return mine[0] if len(mine) == 1 else None


def identity_of_certificate(cert: x509.Certificate) -> PeerIdentity:
    try:
        san = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    except x509.ExtensionNotFound:
        return PeerIdentity(NO_ROLE)
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return PeerIdentity(
        role=role_of_certificate(cert),
        pod_uris=tuple(u for u in uris if POD_URI_RE.match(u)),
        ips=frozenset(str(ip) for ip in san.get_values_for_type(x509.IPAddress)),
        dns_names=frozenset(n.lower() for n in san.get_values_for_type(x509.DNSName)),
    )


@functools.lru_cache(maxsize=256)
def identity_of_pem(pem: bytes) -> PeerIdentity:
    try:
        return identity_of_certificate(x509.load_pem_x509_certificate(pem))
    except ValueError:
        return PeerIdentity(NO_ROLE)


def read_key_file(path, what: str) -> str:  # noqa: ANN001 - a str or Path
    """A secret kept in a file (one line, surrounding whitespace dropped), so it need not sit in a
    config; ConfigError (start refused, exit 2) naming the file."""
    from pathlib import Path

    from motor.common.config.loader import ConfigError

    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path} unreadable: {exc}") from exc
    if not text or "\n" in text:
        raise ConfigError(f"{what} {path} must hold exactly one non-blank line")
    return text
