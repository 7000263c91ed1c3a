"""One rank without fault tolerance or injection: process contract, route set, request handling."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from motor.common.ports import free_port
from motor.common.process import ManagedProcess, start_process
from motor.sim.client import SimClient
from motor.sim.toy_model import expected_completion
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(90)  # per test, module fixtures included

REPO_ROOT = Path(__file__).resolve().parents[3]


Engine = tuple[ManagedProcess, dict, Path]


def start_engine(run: Path) -> Engine:
    ready = run / "ready.json"
    proc = start_process(
        [sys.executable, "-m", "motor.sim.main", "--dp-size", "1", "--dp-master-port", "0", "--port", "0",
         "--ready-file", str(ready), "--model", "tiny-moe", "--model-load-sec", "0.2",
         "--per-token-latency-sec", "0"],
        log_path=run / "engine.log", name="sim-single", cwd=REPO_ROOT,
    )
    try:
        return proc, proc.wait_ready_file(ready, 60, required_keys=("port", "pid")), ready
    except BaseException:
        proc.stop(grace_sec=5)
        raise


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    """The module's engines, the running one last (the SIGTERM test stops one)."""
    started: list[Engine] = []
    try:
        yield started
    finally:
        for proc, _, _ in started:
            proc.stop(grace_sec=5)


@pytest.fixture
def engine(engines: list[Engine], tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """A running engine: the module's, or a new one once a test stopped it."""
    if not engines or not engines[-1][0].running:
        engines.append(start_engine(tmp_path_factory.mktemp("sim-single")))
    return engines[-1]


@pytest.fixture
def client(engine: Engine) -> SimClient:
    return SimClient(f"http://127.0.0.1:{engine[1]['port']}")


def test_ready_file_names_bound_port_and_pid(engine: Engine) -> None:
    proc, doc, _ = engine
    assert doc["pid"] == proc.pid and doc["port"] > 0 and doc["dp_rank"] == 0


def test_ft_and_admin_routes_are_absent(client: SimClient) -> None:
    assert client.request("GET", "/v1/fault_tolerance/status").status == 404
    assert client.request("POST", "/v1/fault_tolerance/apply", {"instruction": "retry", "request_id": "r"}).status == 404
    assert client.request("POST", "/motor/admin/inject", {"fault": "kill_process"}).status == 404
    assert client.request("GET", "/motor/admin/state").status == 404
    assert client.request("GET", "/health").status == 200


def test_models_and_list_prompts(client: SimClient) -> None:
    assert client.request("GET", "/v1/models").body["data"][0]["id"] == "tiny-moe"
    res = client.request("POST", "/v1/completions", {"model": "tiny-moe", "prompt": ["a b", "c"], "max_tokens": 3})
    assert res.status == 200
    assert [c["text"] for c in res.body["choices"]] == [expected_completion("a b", 3), expected_completion("c", 3)]
    assert res.body["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    status, _, events = client.stream("/v1/completions", {"prompt": ["a b", "c"], "max_tokens": 3})
    assert status == 200 and events[-1] == "[DONE]"
    by_index: dict[int, str] = {0: "", 1: ""}
    for ev in events[:-1]:
        by_index[ev["choices"][0]["index"]] += ev["choices"][0]["text"]
    assert by_index == {0: expected_completion("a b", 3), 1: expected_completion("c", 3)}


def test_bad_requests(client: SimClient) -> None:
    res = client.request("POST", "/v1/completions", raw=b"{oops")
    assert res.status == 400 and "not valid JSON" in res.body["error"]["message"]
    res = client.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 0})
    assert res.status == 400 and res.body["error"]["param"] == "max_tokens"
    res = client.request("POST", "/v1/chat/completions", {"model": "gpt-x", "messages": [{"role": "user", "content": "x"}]})
    assert res.status == 404 and "gpt-x" in res.body["error"]["message"]
    assert client.request("GET", "/v1/completions").status == 405


def test_max_tokens_honoured_and_default(client: SimClient) -> None:
    assert client.complete("count me", 37).body["usage"]["completion_tokens"] == 37
    res = client.request("POST", "/v1/completions", {"prompt": "default"})
    assert res.body["usage"]["completion_tokens"] == 16


def test_bad_flag_exits_2_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "motor.sim.main", "--dp-size", "4", "--num-experts", "5"],
        check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "--num-experts 5 + --num-redundant-experts 0 = 5 physical experts is not divisible by --dp-size 4" in done.stderr


def test_sigterm_stops_cleanly_and_removes_ready_file(engine: Engine) -> None:
    proc, _, ready = engine
    proc.stop(grace_sec=10)
    assert proc.returncode == 0, proc.log_tail()
    assert not ready.exists()
    assert "shutting down" in proc.log_tail()


def test_the_api_port_is_held_from_the_start_and_refuses_until_ready(tmp_path: Path) -> None:
    """While the DP group forms, its gloo pairs bind ephemeral ports on the same address: the API's
    port (probed free by the NodeManager) must already be taken, or the kernel may hand it out."""
    port = free_port("127.0.0.1")
    ready = tmp_path / "ready.json"
    proc = start_process(
        [sys.executable, "-m", "motor.sim.main", "--dp-size", "1", "--dp-master-port", "0", "--port", str(port),
         "--ready-file", str(ready), "--model", "tiny-moe", "--model-load-sec", "60"],
        log_path=tmp_path / "engine.log", name="sim-held-port", cwd=REPO_ROOT,
    )
    try:
        wait_for(lambda: "starting" in proc.log_tail(), 60, "the engine starting")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            with pytest.raises(OSError) as bound:
                other.bind(("127.0.0.1", port))
        assert bound.value.errno == errno.EADDRINUSE
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert not ready.exists() and proc.running
    finally:
        proc.stop(grace_sec=10)
