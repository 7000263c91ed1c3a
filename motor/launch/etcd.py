"""Start a throw-away single-member etcd server (tests, demo, local clusters).

The server gets its own data directory, free client and peer ports on a loopback address, and a
unique member name and cluster token, so several can run side by side without joining each other.
It runs as a `ManagedProcess` (own process group, log file), is ready once its `/health` answers 200
on the client URL (etcd answers 200 only when the member has a raft leader and serves reads), and
is stopped by pid group.

    server = start_etcd(run_dir)           # or: await astart_etcd(run_dir)
    try:
        ... EtcdRuntimeStore([server.endpoint]) ...
    finally:
        server.stop()

The binary comes from Debian's `etcd-server` package (`make deps` installs it); `MOTOR_ETCD_BINARY`
overrides the lookup on PATH.

With `tls=EtcdTls(...)` the member serves https only, requires client certificates of the CA on the
client and peer URLs (`--client-cert-auth`, `--peer-client-cert-auth`), and is probed with the
given client certificate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path

from motor.common.ports import free_ports
from motor.common.process import ManagedProcess, ProcessExitedError, start_process

logger = logging.getLogger(__name__)

ETCD_BINARY_ENV = "MOTOR_ETCD_BINARY"
DEFAULT_READY_TIMEOUT_SEC = 30.0
# free_ports() cannot reserve a port: another process may bind it before etcd does.
_BIND_ATTEMPTS = 3


class EtcdNotFoundError(RuntimeError):
    """No etcd binary; the message says how to install one."""


def find_etcd_binary() -> str:
    override = os.environ.get(ETCD_BINARY_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise EtcdNotFoundError(f"{ETCD_BINARY_ENV}={override!r} is not an executable file")
        return override
    found = shutil.which("etcd")
    if found is None:
        raise EtcdNotFoundError("etcd binary not found on PATH: `make deps` installs it (Debian package "
                                f"etcd-server), or set {ETCD_BINARY_ENV} to its path")
    return found


@dataclass(frozen=True)
class EtcdTls:
    """etcd's server certificate (also its peer certificate), the CA it trusts for clients and peers,
    and a client certificate of that CA for the readiness probe."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path
    client_key_file: Path

    def probe_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file))
        ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        return ctx

    def flags(self) -> list[str]:
        return [
            "--cert-file", str(self.cert_file), "--key-file", str(self.key_file),
            "--client-cert-auth", "--trusted-ca-file", str(self.ca_file),
            "--peer-cert-file", str(self.cert_file), "--peer-key-file", str(self.key_file),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", str(self.ca_file),
        ]


@dataclass
class EtcdServer:
    process: ManagedProcess
    host: str
    client_port: int
    peer_port: int
    data_dir: Path
    name: str
    tls: EtcdTls | None = None
    # The command line it was started with (restart() runs it again: same data, ports and member).
    argv: list[str] | None = None

    @property
    def endpoint(self) -> str:
        """host:port, the form StoreConfig.etcd_endpoints takes."""
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.client_port}"

    @property
    def health_url(self) -> str:
        return f"{self.client_url}/health"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, grace_sec: float = 5.0) -> int | None:
        """Stop the server's process group (idempotent); the data directory is left for inspection."""
        return self.process.stop(grace_sec=grace_sec)

    async def astop(self, grace_sec: float = 5.0) -> int | None:
        return await self.process.astop(grace_sec=grace_sec)

    def restart(self, ready_timeout_sec: float = DEFAULT_READY_TIMEOUT_SEC, grace_sec: float = 5.0) -> None:
        """Stops the member (SIGTERM, as an orderly restart would) and starts it again on the same data
        directory and ports; returns once it serves again. Everything it held (keys, leases) survives."""
        self.stop(grace_sec=grace_sec)
        self.start_again(ready_timeout_sec)

    def start_again(self, ready_timeout_sec: float = DEFAULT_READY_TIMEOUT_SEC) -> None:
        """Starts the stopped member again on the same data directory and ports; returns once it serves."""
        if self.argv is None:
            raise RuntimeError(f"etcd {self.name} was not started by this module: no command line to restart")
        if self.process.running:
            raise RuntimeError(f"etcd {self.name} (pid {self.process.pid}) is still running")
        self.process = start_process(self.argv, log_path=self.process.log_path, name=self.name)
        logger.info("restarted etcd %s (pid %d) on %s", self.name, self.process.pid, self.client_url)
        self.process.wait_http_ok(self.health_url, ready_timeout_sec, self.tls.probe_context() if self.tls else None)


def _spawn(run_dir: Path, host: str, name: str | None, tls: EtcdTls | None = None) -> EtcdServer:
    binary = find_etcd_binary()
    client_port, peer_port = free_ports(2, host)
    member = name or f"motor-etcd-{uuid.uuid4().hex[:12]}"
    data_dir = run_dir / f"{member}.data"
    scheme = "https" if tls else "http"
    client_url = f"{scheme}://{host}:{client_port}"
    peer_url = f"{scheme}://{host}:{peer_port}"
    argv = [
        binary,
        "--name", member,
        "--data-dir", str(data_dir),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"{member}={peer_url}",
        "--initial-cluster-state", "new",
        # A unique token keeps a member from ever joining another test's cluster.
        "--initial-cluster-token", member,
        "--logger", "zap",
        "--log-outputs", "stderr",
        *(tls.flags() if tls else []),
    ]
    proc = start_process(argv, log_path=run_dir / f"{member}.log", name=member)
    logger.info("started etcd %s (pid %d) client %s peer %s", member, proc.pid, client_url, peer_url)
    return EtcdServer(process=proc, host=host, client_port=client_port, peer_port=peer_port,
                      data_dir=data_dir, name=member, tls=tls, argv=argv)


def _member_name(name: str | None, attempt: int) -> str | None:
    # A retry must not reuse the failed attempt's data directory or log.
    return f"{name}-{attempt}" if name is not None and attempt > 1 else name


def _bind_race(exc: ProcessExitedError) -> bool:
    return "address already in use" in str(exc)


def start_etcd(run_dir: str | os.PathLike[str], *, host: str = "127.0.0.1", name: str | None = None,
               ready_timeout_sec: float = DEFAULT_READY_TIMEOUT_SEC, tls: EtcdTls | None = None) -> EtcdServer:
    """Start etcd and wait (at most `ready_timeout_sec` per attempt) until it serves; stops it on failure."""
    run_path = Path(run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, _BIND_ATTEMPTS + 1):
        server = _spawn(run_path, host, _member_name(name, attempt), tls)
        try:
            server.process.wait_http_ok(server.health_url, ready_timeout_sec, tls.probe_context() if tls else None)
            return server
        except ProcessExitedError as exc:
            server.stop()
            if _bind_race(exc) and attempt < _BIND_ATTEMPTS:
                logger.warning("etcd %s lost a port race, retrying with new ports", server.name)
                continue
            raise
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable")


async def astart_etcd(run_dir: str | os.PathLike[str], *, host: str = "127.0.0.1", name: str | None = None,
                      ready_timeout_sec: float = DEFAULT_READY_TIMEOUT_SEC, tls: EtcdTls | None = None) -> EtcdServer:
    """`start_etcd` without blocking the event loop."""
    return await asyncio.to_thread(start_etcd, run_dir, host=host, name=name, ready_timeout_sec=ready_timeout_sec,
                                   tls=tls)
