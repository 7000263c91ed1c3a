"""Start-up refusals of the fencing rules, as real processes: several Controller replicas that
would not elect (no etcd) and a NodeManager whose test-only delays are not enabled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[3]


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=30,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_several_controller_replicas_without_etcd_are_refused_at_start() -> None:
    done = run("motor.controller.main", "--host", "127.0.0.1", "--port", "0",
               "--set", "leader_election.expected_replicas=2")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "leader_election.expected_replicas=2 with no store.etcd_endpoints" in done.stderr
    assert "unfenced" in done.stderr


def test_nodemanager_delays_without_fault_injection_enabled_are_refused_at_start(tmp_path: Path) -> None:
    done = run("nodemanager.main", "--set", "controller_address=127.0.0.1:9",
               "--set", "fault_injection.apply_delay_sec=5", "--set", f"log_dir={tmp_path}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "apply_delay_sec set without fault_injection.enabled=true" in done.stderr
