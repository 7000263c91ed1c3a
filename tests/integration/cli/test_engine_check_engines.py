"""motorctl engine-check against real engine processes: the reference engine (motor-engine-sim) and
each bad mode of the fake engine (motor/testing/fake_engine.py). vLLM 0.33.0's router is checked in
tests/integration/vllm/test_engine_check_vllm.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from motor.cli.motorctl import run
from motor.common.ports import free_port
from motor.common.process import ManagedProcess, start_process
from motor.sim.client import SimClient
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(120)  # per test, module fixtures included

REPO = Path(__file__).resolve().parents[3]
MOTORCTL = Path(sys.executable).parent / "motorctl"
HOST = "127.0.0.1"


def engine_check(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return run(["engine-check", *argv], out=out), out.getvalue()


def fail_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("FAIL  ")]


# -- the reference engine ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    run_dir = tmp_path_factory.mktemp("engine-check-sim")
    ready = run_dir / "ready.json"
    proc = start_process(
        [sys.executable, "-m", "motor.sim.main", "--dp-size", "1", "--dp-master-port", "0", "--host", HOST,
         "--port", "0", "--ready-file", str(ready), "--enable-fault-tolerance", "--enable-fault-injection",
         "--per-token-latency-sec", "0"],
        log_path=run_dir / "engine.log", name="sim-engine-check", cwd=REPO,
    )
    try:
        doc = proc.wait_ready_file(ready, 60, required_keys=("port", "pid"))
        yield f"http://{HOST}:{doc['port']}"
    finally:
        proc.stop(grace_sec=5)


def test_reference_engine_conforms(sim: str) -> None:
    code, out = engine_check(sim, "--rank", "0")
    assert code == 0, out
    lines = out.splitlines()
    assert "ok    identity: one entry, id 0 = --rank" in lines and "ok    status: 'healthy'" in lines
    assert "ok    Motor's NodeManager bridge reads endpoint 0: status=healthy" in lines
    scale_up = [line for line in lines if "scale_up:" in line]
    assert len(scale_up) == 1 and scale_up[0].startswith("ok    scale_up: declared ('supported_instructions' "), out


def test_reference_engine_with_the_wrong_rank_fails(sim: str) -> None:
    code, out = engine_check(sim, "--rank", "2")
    assert code == 1
    assert fail_lines(out) == [
        "FAIL  identity: the entry's id is 0, expected --rank 2",
        ("FAIL  Motor's NodeManager bridge refuses it: engine identity contract violated: endpoint 2: the single "
        "entry has id 0, expected 2"),
    ]


def test_reference_engine_wrong_prefix_says_so(sim: str) -> None:
    code, out = engine_check(sim, "--prefix", "/fault_tolerance")
    assert code == 1 and "HTTP 404, expected 200 (no route there: is --prefix right?" in fail_lines(out)[0]


def test_reference_engine_retry_echoes_our_request_id(sim: str) -> None:
    client = SimClient(sim)
    assert client.inject("unhealthy", reason="engine-check test").status == 200
    wait_for(lambda: client.entry()["status"] == "unhealthy", 20, "the injected unhealthy status")
    code, out = engine_check(sim, "--rank", "0", "--try-retry")
    assert code == 0, out
    assert "ok    status: 'unhealthy'" in out.splitlines()
    assert "ok    202 echoes our request_id" in out.splitlines()


def test_console_script_exit_codes(sim: str) -> None:
    ok = subprocess.run([str(MOTORCTL), "engine-check", sim, "--rank", "0"], check=False, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "result: conforms to Motor's engine FT contract"
    closed = f"http://{HOST}:{free_port(HOST)}"
    gone = subprocess.run([str(MOTORCTL), "engine-check", closed], check=False, capture_output=True, text=True, timeout=60)
    assert gone.returncode == 2 and gone.stdout == ""
    assert gone.stderr.startswith(f"motorctl engine-check: engine unreachable: GET {closed}/v1/fault_tolerance/status")
    usage = subprocess.run([str(MOTORCTL), "engine-check"], check=False, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "the following arguments are required: url" in usage.stderr


# -- the fake engine's bad modes ---------------------------------------------------------------------------
RANK = 1


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    run_dir = tmp_path_factory.mktemp("engine-check-fake")
    port = free_port(HOST)
    proc: ManagedProcess = start_process(
        [sys.executable, "-m", "motor.testing.fake_engine", "--host", HOST, "--port", str(port), "--dp-rank", str(RANK)],
        log_path=run_dir / "fake.log", name="fake-engine-check", cwd=REPO,
    )
    try:
        url = f"http://{HOST}:{port}"
        proc.wait_http_ok(f"{url}/health", 30)
        yield url
    finally:
        proc.stop(grace_sec=5)


def control(url: str, **state: Any) -> None:
    req = urllib.request.Request(f"{url}/fake/control", data=json.dumps(state).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


@pytest.fixture
def fake_engine(fake: str) -> Iterator[str]:
    control(fake, status_mode="ok", apply_mode="accept", status="healthy", hang_sec=3600.0)
    try:
        yield fake
    finally:
        control(fake, status_mode="ok", apply_mode="accept")


@pytest.mark.parametrize(("mode", "reason"), [
    ("wrong_id", "FAIL  identity: the entry's id is 101, expected --rank 1"),
    ("duplicate", "FAIL  identity: duplicate ids [1] in [1, 1]"),
    ("extra", "FAIL  identity: 2 entries (ids [1, 51]); external-LB mode has exactly one"),
    ("empty", "FAIL  identity: 'engines' is empty"),
    ("garbage", "FAIL  status body is not JSON: '<html>not json'"),
    ("bad_status", "FAIL  status: zombie is not one of ['healthy', 'diagnosing', 'unhealthy', 'dead']"),
    ("http500", "FAIL  GET {url}/v1/fault_tolerance/status: HTTP 500, expected 200: 'internal error'"),
    ("not_object", "FAIL  status body is a JSON list, not an object: [1, 2]"),
    ("hang", "FAIL  GET {url}/v1/fault_tolerance/status: no answer within 0.5s"),
])
def test_each_bad_status_mode_fails_with_its_reason(fake_engine: str, mode: str, reason: str) -> None:
    control(fake_engine, status_mode=mode, hang_sec=5.0)
    code, out = engine_check(fake_engine, "--rank", str(RANK), "--timeout", "0.5")
    assert code == 1, out
    assert any(reason.format(url=fake_engine) in line for line in fail_lines(out)), out
    assert out.splitlines()[-1].startswith("result: does NOT conform")


def test_the_fake_engine_ok_mode_conforms(fake_engine: str) -> None:
    code, out = engine_check(fake_engine, "--rank", str(RANK))
    assert code == 0, out


@pytest.mark.parametrize(("mode", "code", "line"), [
    ("accept", 0, "ok    202 echoes our request_id"),
    ("accept_server_id", 0, "info  202 carries request_id '"),
    ("reject_str", 0, "refused, HTTP 400: Invalid instruction"),
    ("reject_list", 0, "refused, HTTP 400: body: Field required"),
    ("hang", 1, "FAIL  POST {url}/v1/fault_tolerance/apply (retry, request_id engine-check-"),
])
def test_try_retry_apply_modes(fake_engine: str, mode: str, code: int, line: str) -> None:
    control(fake_engine, apply_mode=mode, hang_sec=5.0)
    got, out = engine_check(fake_engine, "--rank", str(RANK), "--try-retry", "--timeout", "0.5")
    assert got == code, out
    assert any(line.format(url=fake_engine) in text for text in out.splitlines()), out
    applies = json.load(urllib.request.urlopen(f"{fake_engine}/fake/applies", timeout=5))
    sent = applies[-1]
    assert sent["content_type"] == "application/json"
    assert json.loads(sent["body"])["instruction"] == "retry"
