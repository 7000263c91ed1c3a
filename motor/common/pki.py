"""A development PKI for Motor (`motorctl certs init DIR`, `motor demo --tls`, the launcher's tls).

One self-signed CA and one certificate per role (controller, nodemanager, coordinator, operator),
each with its role as SAN URI ``spiffe://motor/<role>`` and the given hosts as DNS/IP SANs, usable
for both server and client authentication; plus a server certificate for etcd (no role). Keys are
EC P-256, PKCS#8 PEM, mode 0600; the directory is 0700. Files::

    ca.crt ca.key  controller.crt controller.key  nodemanager.crt ...  operator.key  etcd.crt etcd.key

With `pods` (``name=ip`` pairs) every NodeManager gets a certificate of its own instead of the
shared ``nodemanager.crt``: ``nodemanager-<name>.{crt,key}`` with the role URI, the pod's identity
``spiffe://<trust_domain>/ns/<namespace>/pod/<name>`` and the pod IP as its only IP SAN, so it can
speak for its own pod and no other (`motor.controller.identity`).

This is for development and tests: in production a real CA issues the same shape of certificates
(one per pod or service, same role URIs). Validity is days (default 7, at most 90): a development
certificate that leaks does not stay good for long.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from motor.common.security import Role, pod_uri, role_uri

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
DEFAULT_DAYS = 7
MAX_DAYS = 90
DEFAULT_NAMESPACE = "motor"
ETCD = "etcd"


class PkiError(ValueError):
    """The PKI cannot be written; the message names the file or value."""


@dataclass(frozen=True)
class DevPki:
    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    def cert_file(self, name: Role | str) -> Path:
        return self.directory / f"{_name(name)}.crt"

    def key_file(self, name: Role | str) -> Path:
        return self.directory / f"{_name(name)}.key"

    def security(self, role: Role) -> dict[str, Any]:
        """The `security` config block of a process of this role."""
        return {"ca_file": str(self.ca_file), "cert_file": str(self.cert_file(role)),
                "key_file": str(self.key_file(role))}

    def pod_name(self, pod: str) -> str:
        """The file stem of a pod's own NodeManager certificate."""
        return f"{Role.NODEMANAGER.value}-{pod}"

    def pod_security(self, pod: str) -> dict[str, Any]:
        """The `security` block of the NodeManager of `pod` (its own certificate)."""
        name = self.pod_name(pod)
        return {"ca_file": str(self.ca_file), "cert_file": str(self.cert_file(name)),
                "key_file": str(self.key_file(name))}

    def files(self, pods: Sequence[str] = ()) -> list[Path]:
        roles = [r.value for r in Role if not (pods and r is Role.NODEMANAGER)]
        names = ["ca", *roles, *(self.pod_name(p) for p in pods), ETCD]
        return [self.directory / f"{n}.{ext}" for n in names for ext in ("crt", "key")]


def parse_pod(text: str) -> tuple[str, str]:
    """'NAME=IP' → (name, ip); PkiError naming the value otherwise."""
    name, sep, ip = text.partition("=")
    if not sep or not _POD_NAME_RE.match(name):
        raise PkiError(f"pod {text!r} is not NAME=IP with NAME a DNS label (a-z, 0-9, -)")
    try:
        return name, str(ipaddress.ip_address(ip))
    except ValueError:
        raise PkiError(f"pod {text!r}: {ip!r} is not an IP address") from None


_POD_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _name(name: Role | str) -> str:
    return name.value if isinstance(name, Role) else name


def _san_entries(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        if not host or any(ch.isspace() for ch in host):
            raise PkiError(f"host {host!r} is not a DNS name or IP address")
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def _leaf(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common_name: str,
          sans: list[x509.GeneralName], days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "motor"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def create_dev_pki(directory: str | os.PathLike[str], hosts: Sequence[str] = DEFAULT_HOSTS, *,
                   days: int = DEFAULT_DAYS, force: bool = False, ca_name: str = "motor development CA",
                   pods: Sequence[tuple[str, str]] = (), trust_domain: str = "motor",
                   namespace: str = DEFAULT_NAMESPACE) -> DevPki:
    """Writes a CA and one certificate per role (and etcd's) into `directory`, with `pods` one
    NodeManager certificate per pod instead of the shared one; refuses to overwrite an existing
    file unless `force`."""
    if not 1 <= days <= MAX_DAYS:
        raise PkiError(f"days={days} is not in [1, {MAX_DAYS}]")
    names = [name for name, _ in pods]
    if len(set(names)) != len(names):
        raise PkiError(f"pod names {names} repeat")
    pki = DevPki(Path(directory))
    sans = _san_entries(list(hosts))
    if not force:
        existing = [str(p) for p in pki.files(names) if p.exists()]
        if existing:
            raise PkiError(f"{existing[0]} exists (and {len(existing) - 1} more): pass --force to overwrite")
    pki.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(pki.directory, 0o700)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "motor"),
                            x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.directory / "ca.key", ca_key)
    _write_cert(pki.ca_file, ca_cert)
    for role in Role:
        if pods and role is Role.NODEMANAGER:
            continue
        cert, key = _leaf(ca_cert, ca_key, f"motor-{role.value}",
                          [x509.UniformResourceIdentifier(role_uri(role)), *sans], days)
        _write_key(pki.key_file(role), key)
        _write_cert(pki.cert_file(role), cert)
    for name, ip in pods:
        cert, key = _leaf(ca_cert, ca_key, f"motor-nodemanager-{name}",
                          [x509.UniformResourceIdentifier(role_uri(Role.NODEMANAGER)),
                           x509.UniformResourceIdentifier(pod_uri(trust_domain, namespace, name)),
                           x509.IPAddress(ipaddress.ip_address(ip))], days)
        _write_key(pki.key_file(pki.pod_name(name)), key)
        _write_cert(pki.cert_file(pki.pod_name(name)), cert)
    cert, key = _leaf(ca_cert, ca_key, "motor-etcd", sans, days)
    _write_key(pki.key_file(ETCD), key)
    _write_cert(pki.cert_file(ETCD), cert)
    return pki


def issue_certificate(pki: DevPki, name: str, common_name: str, days: int = DEFAULT_DAYS) -> DevPki:
    """One more certificate of `pki`'s CA, with no role URI (its only SAN: DNS `name`):
    `<name>.{crt,key}`; etcd's admin certificate is CN=root: `issue_certificate(pki, "etcd-admin", "root")`."""
    if not 1 <= days <= MAX_DAYS:
        raise PkiError(f"days={days} is not in [1, {MAX_DAYS}]")
    ca_cert = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key((pki.directory / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    cert, key = _leaf(ca_cert, ca_key, common_name, [x509.DNSName(name)], days)
    _write_key(pki.key_file(name), key)
    _write_cert(pki.cert_file(name), cert)
    return pki
