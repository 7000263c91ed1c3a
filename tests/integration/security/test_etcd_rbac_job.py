"""The etcd RBAC bootstrap as the production overlay's Job runs it (`python -m motor.launch.etcd_rbac
bootstrap`, a real process) against a real TLS etcd: the first run adds the users, the role and the
permission and enables auth; the second (a Job retried or re-applied) finds everything in place and
changes nothing; afterwards the Controller's certificate writes under `/motor/`, a NodeManager's is
denied, and the bootstrap with a certificate that is not etcd's root is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from motor.common.pki import ETCD, DevPki, create_dev_pki, issue_certificate
from motor.common.security import Role
from motor.launch.etcd import EtcdServer, EtcdTls, astart_etcd

from .test_etcd_rbac import _client, _refused

pytestmark = [pytest.mark.timeout(90), pytest.mark.etcd]

REPO = Path(__file__).resolve().parents[3]
ADMIN = "etcd-admin"


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    return issue_certificate(create_dev_pki(tmp_path / "pki"), ADMIN, "root")


@pytest.fixture
async def etcd(pki: DevPki, tmp_path: Path) -> AsyncIterator[EtcdServer]:
    tls = EtcdTls(pki.ca_file, pki.cert_file(ETCD), pki.key_file(ETCD), pki.cert_file(ADMIN), pki.key_file(ADMIN))
    server = await astart_etcd(tmp_path / "etcd", tls=tls)
    try:
        yield server
    finally:
        await server.astop()


def _bootstrap(etcd: EtcdServer, pki: DevPki, cert: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "motor.launch.etcd_rbac", "bootstrap", "--endpoint", etcd.endpoint,
            "--cacert", str(pki.ca_file), "--cert", str(pki.cert_file(cert)), "--key", str(pki.key_file(cert)),
            "--controller-cert", str(pki.cert_file(Role.CONTROLLER))]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env, cwd=REPO)


async def test_the_bootstrap_job_is_idempotent_and_leaves_only_the_controller(pki: DevPki, etcd: EtcdServer) -> None:
    first = _bootstrap(etcd, pki, ADMIN)
    assert first.returncode == 0, first.stderr
    assert "user motor-controller added" in first.stdout and "granted readwrite /motor/*" in first.stdout
    again = _bootstrap(etcd, pki, ADMIN)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().endswith("auth enabled; nothing was missing"), again.stdout

    controller = _client(etcd, pki, Role.CONTROLLER)
    nodemanager = _client(etcd, pki, Role.NODEMANAGER)
    try:
        await controller.put(b"/motor/v1/probe", b"ok")
        assert "permission denied" in await _refused(nodemanager.get(b"/motor/v1/probe"))
        assert "permission denied" in await _refused(nodemanager.put(b"/motor/v1/leader", b"mine"))
        assert "permission denied" in await _refused(controller.put(b"/other/key", b"x"))
    finally:
        await controller.close()
        await nodemanager.close()
    # Auth is on: only etcd's root administers it now.
    refused = _bootstrap(etcd, pki, Role.NODEMANAGER.value)
    assert refused.returncode == 1 and "etcd-rbac:" in refused.stderr, refused.stderr
