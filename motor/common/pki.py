"""A development PKI for Motor (`motorctl certs init DIR`, `motor demo --tls`, the launcher's tls).

One self-signed CA and one certificate per role (controller, nodemanager, coordinator, operator),
each with its role as SAN URI ``spiffe://motor/<role>`` and the given hosts as DNS/IP SANs, usable
for both server and client authentication; plus a server certificate for etcd (no role). Keys are
EC P-256, PKCS#8 PEM, mode 0600; the directory is 0700. Files::

    ca.crt ca.key  controller.crt controller.key  nodemanager.crt ...  operator.key  etcd.crt etcd.key

This is for development and tests: in production a real CA issues the same shape of certificates
(one per pod or service, same role URIs).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from motor.common.security import Role, role_uri

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
DEFAULT_DAYS = 365
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

    def files(self) -> list[Path]:
        names = ["ca", *[r.value for r in Role], ETCD]
        return [self.directory / f"{n}.{ext}" for n in names for ext in ("crt", "key")]


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
                   days: int = DEFAULT_DAYS, force: bool = False, ca_name: str = "motor development CA") -> DevPki:
    """Writes a CA and one certificate per role (and etcd's) into `directory`; refuses to overwrite
    an existing file unless `force`."""
    if not 1 <= days <= 3650:
        raise PkiError(f"days={days} is not in [1, 3650]")
    pki = DevPki(Path(directory))
    sans = _san_entries(list(hosts))
    if not force:
        existing = [str(p) for p in pki.files() if p.exists()]
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
        cert, key = _leaf(ca_cert, ca_key, f"motor-{role.value}",
                          [x509.UniformResourceIdentifier(role_uri(role)), *sans], days)
        _write_key(pki.key_file(role), key)
        _write_cert(pki.cert_file(role), cert)
    cert, key = _leaf(ca_cert, ca_key, "motor-etcd", sans, days)
    _write_key(pki.key_file(ETCD), key)
    _write_cert(pki.cert_file(ETCD), cert)
    return pki
