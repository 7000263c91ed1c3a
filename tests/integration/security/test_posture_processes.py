"""The posture of each service as a real process: a plaintext bind off loopback, TLS without client
certificates, and production mode with plaintext or test delays each end the process before it
listens, with status 2 and one line naming the key; the same process starts once the posture is
explicit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role

BIN = Path(sys.executable).parent
NM = {"controller_address": "127.0.0.1:1", "instance_id": 1, "engines": [{"dp_rank": 0, "port": 0}], "dp_size": 1}
SCRIPTS = {Role.CONTROLLER: "motor-controller", Role.COORDINATOR: "motor-coordinator",
           Role.NODEMANAGER: "motor-nodemanager"}
BASE = {Role.CONTROLLER: {"hardware_monitor": {"kubernetes": "off"}}, Role.COORDINATOR: {}, Role.NODEMANAGER: NM}

pytestmark = pytest.mark.timeout(120)


def _refusals(pki: DevPki) -> list[tuple[Role, dict, list[str], str]]:
    """(service, config, extra argv, what its one line must name). Each service's plaintext bind off
    loopback (which used to start and serve plaintext); the other rules once each (the unit tests of
    motor.common.config.posture cover them per service)."""
    out = [(role, BASE[role], ["--host", "0.0.0.0"], "server.host='0.0.0.0' is not a loopback address")
           for role in SCRIPTS]
    tls = {"cert_file": str(pki.cert_file(Role.COORDINATOR)), "key_file": str(pki.key_file(Role.COORDINATOR))}
    out.append((Role.COORDINATOR, {"server": {"tls": tls}}, [],
                "server.tls.require_client_auth=false: roles are mandatory"))
    out.append((Role.NODEMANAGER, {**NM, "security": pki.security(Role.NODEMANAGER),
                                   "fault_injection": {"enabled": True, "apply_delay_sec": 5.0}}, ["--mode", "production"],
                "mode=production refuses fault injection and test delays: "
                "fault_injection.enabled=True, fault_injection.apply_delay_sec=5.0"))
    return out


def test_each_service_refuses_an_unsafe_posture_with_one_line_and_status_2(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path / "pki")
    cases = _refusals(pki)
    procs = []
    for index, (role, config, argv, _) in enumerate(cases):
        path = tmp_path / f"{index}.json"
        path.write_text(json.dumps(config))
        procs.append(subprocess.Popen([str(BIN / SCRIPTS[role]), "--config", str(path), "--port", "0",
                                       "--ready-file", str(tmp_path / f"{index}.ready"), *argv],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for (role, _, argv, named), proc in zip(cases, procs, strict=True):
            _, stderr = proc.communicate(timeout=30)
            assert proc.returncode == 2, (role, argv, stderr)
            assert stderr.count("\n") == 1 and named in stderr, (role, argv, stderr)
            assert stderr.startswith(f"{SCRIPTS[role]}: invalid configuration: "), stderr
    finally:
        for proc in procs:  # a process that started after all must not outlive the test
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert not list(tmp_path.glob("*.ready"))  # none of them ever served
