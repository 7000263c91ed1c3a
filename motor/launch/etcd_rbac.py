"""etcd RBAC for Motor: only the Controller's certificate may read or write Motor's keys.

One CA signs every Motor certificate, and etcd with `--client-cert-auth` alone lets any of them in as
root. With auth enabled, etcd takes a client certificate's Common Name as the user name, and a user
holds only the permissions of its roles. The bootstrap, done once while auth is still off:

    user root (no password; a certificate with CN=root administers etcd afterwards)
    user <Controller CN> (no password), role motor-controller: readwrite on the `/motor/` prefix
    auth enable

NodeManagers, the Coordinator and every other certificate of the CA have no etcd user: every
request of theirs is refused (etcd: permission denied / user name not found). `deploy/k8s`'s
production overlay runs the same steps with etcdctl (docs/deployment.md).

    enable_rbac(server, controller_cert_file)   # a TLS EtcdServer from motor.launch.etcd
"""

from __future__ import annotations

import logging
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


def enable_rbac(server: EtcdServer, controller_cert_file: str | Path, prefix: str = MOTOR_PREFIX) -> str:
    """Creates root, the Controller's user and role on `prefix`, and enables auth on `server` (a TLS
    member whose auth is still off; its probe certificate makes the calls). Returns the Controller's
    user name."""
    if server.tls is None:
        raise ValueError(f"etcd {server.name} serves plaintext: RBAC by certificate needs TLS")
    tls = server.tls
    user = common_name(controller_cert_file)
    credentials = grpc.ssl_channel_credentials(Path(tls.ca_file).read_bytes(), Path(tls.client_key_file).read_bytes(),
                                               Path(tls.client_cert_file).read_bytes())
    no_password = auth_pb2.UserAddOptions(no_password=True)
    with grpc.secure_channel(server.endpoint, credentials) as channel:
        auth = rpc_pb2_grpc.AuthStub(channel)
        calls = [
            (auth.UserAdd, rpc_pb2.AuthUserAddRequest(name=ROOT, options=no_password)),
            (auth.UserGrantRole, rpc_pb2.AuthUserGrantRoleRequest(user=ROOT, role=ROOT)),
            (auth.UserAdd, rpc_pb2.AuthUserAddRequest(name=user, options=no_password)),
            (auth.RoleAdd, rpc_pb2.AuthRoleAddRequest(name=CONTROLLER_ROLE)),
            (auth.RoleGrantPermission, rpc_pb2.AuthRoleGrantPermissionRequest(
                name=CONTROLLER_ROLE, perm=auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE,
                                                               key=prefix.encode(), range_end=prefix_range_end(prefix)))),
            (auth.UserGrantRole, rpc_pb2.AuthUserGrantRoleRequest(user=user, role=CONTROLLER_ROLE)),
            (auth.AuthEnable, rpc_pb2.AuthEnableRequest()),
        ]
        for call, request in calls:
            call(request, timeout=_CALL_TIMEOUT_SEC)
    log.info("etcd %s: auth enabled; user %s (role %s: readwrite %s*) is the only non-root user",
             server.name, user, CONTROLLER_ROLE, prefix)
    return user
