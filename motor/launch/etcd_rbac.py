"""etcd RBAC for Motor: only the Controller's certificate may read or write Motor's keys.

One CA signs every Motor certificate, and etcd with `--client-cert-auth` alone lets any of them in as
root. With auth enabled, etcd takes a client certificate's Common Name as the user name, and a user
holds only the permissions of its roles. The bootstrap:

    user root (no password; a certificate with CN=root administers etcd afterwards)
    user <Controller CN> (no password), role motor-controller: readwrite on the `/motor/` prefix
    auth enable

NodeManagers, the Coordinator and every other certificate of the CA have no etcd user: every
request of theirs is refused (etcd: permission denied / user name not found).

The bootstrap is idempotent: it reads the users, roles and permissions first and adds only what is
missing, so it runs again and again (a Kubernetes Job retried, re-applied) with the same result. Its
first run may use any certificate of the CA (auth is still off); every later one needs the admin
certificate (CN=root), which the production overlay's Job mounts for every run.

    python -m motor.launch.etcd_rbac bootstrap --endpoint HOST:2379 --cacert ca.crt --cert root.crt \
        --key root.key --controller-cert controller.crt      # or --controller-user NAME
    enable_rbac(server, controller_cert_file)   # a TLS EtcdServer from motor.launch.etcd (the launcher)
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from aetcd.rpc import auth_pb2, rpc_pb2, rpc_pb2_grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from motor.launch.etcd import EtcdServer

log = logging.getLogger(__name__)

ROOT = "root"
CONTROLLER_ROLE = "motor-controller"
MOTOR_PREFIX = "/motor/"
_CALL_TIMEOUT_SEC = 5.0
# Codes after which the next endpoint is tried (the member is down or unreachable).
_TRY_NEXT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def common_name(cert_file: str | Path) -> str:
    """The certificate's CN: the etcd user it authenticates as."""
    cert = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise ValueError(f"{cert_file}: {len(names)} Common Names; etcd needs exactly one as the user name")
    return str(names[0].value)


def prefix_range_end(prefix: str) -> bytes:
    """etcd's range end of every key starting with `prefix` (its last byte plus one)."""
    raw = prefix.encode()
    return raw[:-1] + bytes([raw[-1] + 1])


@dataclass(frozen=True)
class AdminTls:
    """The CA of etcd's server certificate and the client certificate the bootstrap calls with."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca_file.read_bytes(), self.key_file.read_bytes(),
                                            self.cert_file.read_bytes())


def _bootstrap_on(auth: rpc_pb2_grpc.AuthStub, user: str, prefix: str, timeout_sec: float) -> list[str]:
    """The missing steps, done; returns their descriptions (empty: everything was in place)."""
    done: list[str] = []
    users = set(auth.UserList(rpc_pb2.AuthUserListRequest(), timeout=timeout_sec).users)
    roles = set(auth.RoleList(rpc_pb2.AuthRoleListRequest(), timeout=timeout_sec).roles)
    no_password = auth_pb2.UserAddOptions(no_password=True)
    for name in (ROOT, user):
        if name not in users:
            auth.UserAdd(rpc_pb2.AuthUserAddRequest(name=name, options=no_password), timeout=timeout_sec)
            done.append(f"user {name} added")
    if CONTROLLER_ROLE not in roles:
        auth.RoleAdd(rpc_pb2.AuthRoleAddRequest(name=CONTROLLER_ROLE), timeout=timeout_sec)
        done.append(f"role {CONTROLLER_ROLE} added")
    perm = auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE, key=prefix.encode(),
                               range_end=prefix_range_end(prefix))
    held = auth.RoleGet(rpc_pb2.AuthRoleGetRequest(role=CONTROLLER_ROLE), timeout=timeout_sec).perm
    if perm not in held:
        auth.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(name=CONTROLLER_ROLE, perm=perm),
                                 timeout=timeout_sec)
        done.append(f"role {CONTROLLER_ROLE} granted readwrite {prefix}*")
    for name, role in ((ROOT, ROOT), (user, CONTROLLER_ROLE)):
        if role not in auth.UserGet(rpc_pb2.AuthUserGetRequest(name=name), timeout=timeout_sec).roles:
            auth.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user=name, role=role), timeout=timeout_sec)
            done.append(f"user {name} granted role {role}")
    # Enabling an enabled auth is a no-op in etcd; called every time, so a run interrupted after the
    # grants still ends enabled.
    auth.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=timeout_sec)
    return done


def bootstrap(endpoints: Sequence[str], tls: AdminTls, controller_user: str, prefix: str = MOTOR_PREFIX,
              timeout_sec: float = _CALL_TIMEOUT_SEC) -> list[str]:
    """Brings etcd's auth to the state of the module docstring through the first endpoint (host:port)
    that answers; returns the steps it took (empty when nothing was missing). A grpc.RpcError of the
    last endpoint tried, or of the first one that answered, is raised."""
    if not endpoints:
        raise ValueError("no etcd endpoint")
    if controller_user == ROOT:
        raise ValueError("the Controller's certificate must not be etcd's root (CN=root)")
    credentials = tls.credentials()
    for index, endpoint in enumerate(endpoints):
        with grpc.secure_channel(endpoint, credentials) as channel:
            try:
                done = _bootstrap_on(rpc_pb2_grpc.AuthStub(channel), controller_user, prefix, timeout_sec)
            except grpc.RpcError as exc:
                if exc.code() in _TRY_NEXT and index + 1 < len(endpoints):  # type: ignore[attr-defined]
                    log.warning("etcd %s: %s; trying the next endpoint", endpoint, exc.code())  # type: ignore[attr-defined]
                    continue
                raise
        log.info("etcd %s: auth enabled; user %s (role %s: readwrite %s*) is the only non-root user; %s",
                 endpoint, controller_user, CONTROLLER_ROLE, prefix, "; ".join(done) or "nothing was missing")
        return done
    raise AssertionError("unreachable: the last endpoint raises or returns")


def enable_rbac(server: EtcdServer, controller_cert_file: str | Path, prefix: str = MOTOR_PREFIX) -> str:
    """Creates root, the Controller's user and role on `prefix`, and enables auth on `server` (a TLS
    member whose auth is still off; its probe certificate makes the calls). Returns the Controller's
    user name."""
    if server.tls is None:
        raise ValueError(f"etcd {server.name} serves plaintext: RBAC by certificate needs TLS")
    tls = server.tls
    user = common_name(controller_cert_file)
    bootstrap([server.endpoint], AdminTls(Path(tls.ca_file), Path(tls.client_cert_file), Path(tls.client_key_file)),
              user, prefix)
    return user


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m motor.launch.etcd_rbac` (the production overlay's Job)."""
    parser = argparse.ArgumentParser(prog="python -m motor.launch.etcd_rbac",
                                     description="etcd RBAC for Motor: only the Controller's certificate CN "
                                                 "gets a user (readwrite on Motor's prefix). Idempotent.")
    commands = parser.add_subparsers(dest="command", required=True)
    boot = commands.add_parser("bootstrap", help="add what is missing and enable auth")
    boot.add_argument("--endpoint", action="append", required=True,
                      help="host:port of an etcd member (repeat: the first that answers is used)")
    boot.add_argument("--cacert", required=True, type=Path, help="CA of etcd's server certificate")
    boot.add_argument("--cert", required=True, type=Path,
                      help="client certificate: CN=root (any of the CA's before the first run)")
    boot.add_argument("--key", required=True, type=Path, help="key of --cert")
    who = boot.add_mutually_exclusive_group(required=True)
    who.add_argument("--controller-cert", type=Path, help="the Controller's certificate (its CN is the user)")
    who.add_argument("--controller-user", help="the Controller certificate's CN")
    boot.add_argument("--prefix", default=MOTOR_PREFIX, help=f"Motor's key prefix (default {MOTOR_PREFIX})")
    boot.add_argument("--timeout-sec", type=float, default=_CALL_TIMEOUT_SEC, help="deadline of each call")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        user = args.controller_user or common_name(args.controller_cert)
        done = bootstrap([e.removeprefix("https://") for e in args.endpoint],
                         AdminTls(args.cacert, args.cert, args.key), user, args.prefix, args.timeout_sec)
    except (OSError, ValueError) as exc:
        print(f"etcd-rbac: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"etcd-rbac: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    print(f"etcd-rbac: user {user} holds readwrite on {args.prefix}*; auth enabled; "
          + ("; ".join(done) if done else "nothing was missing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
