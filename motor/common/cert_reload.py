"""Certificates that are replaced while the process runs, and how long each has left.

A mounted Secret (cert-manager, a rotated dev PKI) changes its files in place; a process must pick
the new ones up without a restart, and say how long the ones it serves have left:

* gRPC servers get their credentials through `reloading_server_credentials`: gRPC asks for them
  on every handshake, the files are stat()ed (three calls) and, when one changed and the new set
  loads as a valid key pair, the next handshakes use it. A half-written or mismatched set is
  logged and the last good one stays.
* TLS contexts of the HTTP pages and HTTPS clients are re-loaded in place by a `ContextReloader`
  (a bounded poll, `poll_sec`): an `ssl.SSLContext` takes a new chain for its later handshakes.
* gRPC client channels are reopened by their owners when `CertificateFiles.changed_since` says the
  files changed since the channel was opened (the Controller-following client checks on each call).
* `CertificateExpiryCollector` exports ``motor_certificate_expiry_seconds{file}``: seconds until
  each certificate file's first certificate expires (negative once expired), read at scrape.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import grpc
from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int], ...]


class CertificateFiles:
    """A certificate, its key and a CA file, and whether they changed since a stamp."""

    def __init__(self, cert_file: Path | str, key_file: Path | str | None, ca_file: Path | str | None) -> None:
        self.paths = tuple(Path(p) for p in (cert_file, key_file, ca_file) if p is not None)
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file) if key_file is not None else None
        self.ca_file = Path(ca_file) if ca_file is not None else None

    def stamp(self) -> Stamp:
        out = []
        for path in self.paths:
            try:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((-1, -1))
        return tuple(out)

    def changed_since(self, stamp: Stamp) -> bool:
        return self.stamp() != stamp

    def read_checked(self) -> tuple[bytes, bytes | None, bytes | None]:
        """(cert, key, ca) PEM bytes, once they load as a matching pair; ValueError/OSError otherwise."""
        cert = self.cert_file.read_bytes()
        key = self.key_file.read_bytes() if self.key_file else None
        ca = self.ca_file.read_bytes() if self.ca_file else None
        if key is not None:
            _check_pair(cert, key)
        if ca is not None:
            x509.load_pem_x509_certificates(ca)
        return cert, key, ca


def _check_pair(cert: bytes, key: bytes) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # load_cert_chain reads files only: a private temporary directory, removed at once.
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp, "c.pem"), Path(tmp, "k.pem")
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        os.chmod(key_path, 0o600)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise ValueError(f"certificate and key do not load as a pair: {exc}") from exc


def reloading_server_credentials(cert_file: Path, key_file: Path, client_ca_file: Path | None,
                                 require_client_auth: bool, label: str = "gRPC server") -> grpc.ServerCredentials:
    """Server credentials that follow the files: checked on each handshake, swapped once valid."""
    files = CertificateFiles(cert_file, key_file, client_ca_file)
    state = {"stamp": files.stamp()}
    cert, key, ca = files.read_checked()

    def configuration(cert: bytes, key: bytes, ca: bytes | None):  # noqa: ANN202 - a grpc configuration
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch():  # noqa: ANN202 - called by gRPC on each handshake; None keeps the current one
        stamp = files.stamp()
        if stamp == state["stamp"]:
            return None
        state["stamp"] = stamp
        try:
            cert, key, ca = files.read_checked()
        except (OSError, ValueError) as exc:
            log.error("%s: certificate files %s changed but do not load (%s); the last good ones stay", label,
                      ", ".join(map(str, files.paths)), exc)
            return None
        assert key is not None
        log.warning("%s: certificate %s reloaded (expires %s)", label, cert_file, _expiry_text(cert))
        return configuration(cert, key, ca)

    assert key is not None
    return grpc.dynamic_ssl_server_credentials(configuration(cert, key, ca), fetch,
                                               require_client_authentication=require_client_auth)


class ContextReloader:
    """Re-loads `context`'s chain (and CA) from the files when they change, polling every `poll_sec`."""

    def __init__(self, context: ssl.SSLContext, files: CertificateFiles, label: str, poll_sec: float = 5.0) -> None:
        self.context = context
        self.files = files
        self.label = label
        self.poll_sec = poll_sec
        self.reloads = 0
        self._stamp = files.stamp()
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """One poll: True when the context took new files."""
        stamp = self.files.stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.files.read_checked()
            if self.files.key_file is not None:
                self.context.load_cert_chain(self.files.cert_file, self.files.key_file)
            if self.files.ca_file is not None:
                self.context.load_verify_locations(cafile=str(self.files.ca_file))
        except (OSError, ValueError, ssl.SSLError) as exc:
            log.error("%s: certificate files changed but do not load (%s); the last good ones stay", self.label, exc)
            return False
        self.reloads += 1
        log.warning("%s: certificate %s reloaded", self.label, self.files.cert_file)
        return True

    def start(self) -> None:
        async def poll() -> None:
            while True:  # bounded by the poll interval; ends with stop()
                await asyncio.sleep(self.poll_sec)
                self.check()

        self._task = asyncio.create_task(poll(), name=f"cert-reload {self.label}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


def _not_after(pem: bytes) -> datetime.datetime:
    cert = x509.load_pem_x509_certificate(pem)
    return cert.not_valid_after_utc


def _expiry_text(pem: bytes) -> str:
    try:
        return _not_after(pem).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return "unknown"


class CertificateExpiryCollector(Collector):
    """``motor_certificate_expiry_seconds{file}`` of each certificate file, read at scrape (cached by
    the file's stamp, so a rotated file shows its new expiry at the next scrape)."""

    def __init__(self, files: Iterable[Path | str], now=lambda: datetime.datetime.now(datetime.UTC)) -> None:  # noqa: ANN001
        self.files: Sequence[Path] = tuple(dict.fromkeys(Path(f) for f in files))
        self._now = now
        self._cache: dict[Path, tuple[tuple[int, int], datetime.datetime | None]] = {}

    def _expiry(self, path: Path) -> datetime.datetime | None:
        try:
            st = os.stat(path)
            stamp = (st.st_mtime_ns, st.st_size)
            cached = self._cache.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            expiry: datetime.datetime | None = _not_after(path.read_bytes())
        except (OSError, ValueError):
            stamp, expiry = (-1, -1), None
        self._cache[path] = (stamp, expiry)
        return expiry

    def collect(self):  # noqa: ANN201 - prometheus_client's collector protocol
        family = GaugeMetricFamily("motor_certificate_expiry_seconds",
                                   "Seconds until the certificate in the file expires (negative: expired); "
                                   "absent when the file cannot be read", labels=["file"])
        now = self._now()
        for path in self.files:
            expiry = self._expiry(path)
            if expiry is not None:
                family.add_metric([str(path)], (expiry - now).total_seconds())
        yield family

    def describe(self):  # noqa: ANN201 - no samples at registration (files are read at scrape only)
        return []


def watch_expiry(registry, files: Iterable[Path | str | None]) -> None:  # noqa: ANN001 - a CollectorRegistry
    """Registers the expiry gauge of `files` (None entries skipped) in `registry`."""
    present = [f for f in files if f is not None]
    if present:
        registry.register(CertificateExpiryCollector(present))


def watch_security(security, registry, label: str,  # noqa: ANN001 - a SecurityConfig, a CollectorRegistry
                   contexts: Iterable[ssl.SSLContext | None] = ()) -> list[ContextReloader]:
    """What a process with `security` runs for its certificates: the expiry gauge of its certificate
    and CA in `registry`, and a started reloader per TLS context (HTTP pages). Nothing without it."""
    if security is None:
        return []
    watch_expiry(registry, [security.cert_file, security.ca_file])
    files = CertificateFiles(security.cert_file, security.key_file, security.ca_file)
    reloaders = [ContextReloader(ctx, files, label) for ctx in contexts if ctx is not None]
    for reloader in reloaders:
        reloader.start()
    return reloaders


async def stop_reloaders(reloaders: Iterable[ContextReloader]) -> None:
    for reloader in reloaders:
        await reloader.stop()


def client_files(tls) -> CertificateFiles | None:  # noqa: ANN001 - a ClientTlsConfig or None
    """The files of a client TLS config whose change means its channels should be reopened."""
    return None if tls is None else CertificateFiles(tls.cert_file or tls.ca_file, tls.key_file, tls.ca_file)


_closing: set[asyncio.Future[object]] = set()


def close_later(channel) -> None:  # noqa: ANN001 - a grpc.aio.Channel
    """Closes a replaced channel in the background (its calls in flight end first or fail)."""
    task = asyncio.ensure_future(channel.close(grace=1.0))
    _closing.add(task)
    task.add_done_callback(_closing.discard)
