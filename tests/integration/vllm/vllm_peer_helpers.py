"""Starting and driving the vLLM-router peer (tests/vllm_peer/serve.py) from the main venv's tests."""

from __future__ import annotations

import http.client
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from motor.common.process import ManagedProcess, start_process

REPO = Path(__file__).resolve().parents[3]
VLLM_VENV = REPO / ".venv-vllm"
SERVE_PY = REPO / "tests" / "vllm_peer" / "serve.py"
# A cold first import of vLLM takes ~30 s on these machines; give it room on a loaded one.
PEER_READY_TIMEOUT_SEC = 150.0
FT_PREFIX = "/fault_tolerance"  # vLLM 0.33.0's routes


def vllm_python() -> str | None:
    """The side venv's interpreter, or None when the venv was not made."""
    python = VLLM_VENV / "bin" / "python"
    return str(python) if python.is_file() and os.access(python, os.X_OK) else None


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def http_request(host: str, port: int, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None, timeout_sec: float = 10.0) -> Reply:
    """One request exactly as given (http.client adds no Content-Type of its own)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_sec)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8", "replace"))
    finally:
        conn.close()


@dataclass
class Peer:
    proc: ManagedProcess
    rank: int
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, doc: Any = None, headers: dict[str, str] | None = None) -> Reply:
        body = None if doc is None else json.dumps(doc).encode()
        hdrs = {"Content-Type": "application/json"} if doc is not None else {}
        hdrs.update(headers or {})
        return http_request(self.host, self.port, method, path, body, hdrs)

    def push(self, status: str, **fields: Any) -> dict[str, Any]:
        """A status push of the scripted engine core (the whole entry is replaced)."""
        reply = self.request("POST", "/peer/state", {"status": status, **fields})
        assert reply.status == 200, f"peer rank {self.rank}: /peer/state answered {reply.status} {reply.text}"
        return reply.json()

    def script(self, **fields: Any) -> dict[str, Any]:
        reply = self.request("POST", "/peer/script", fields)
        assert reply.status == 200, f"peer rank {self.rank}: /peer/script answered {reply.status} {reply.text}"
        return reply.json()

    def handled(self) -> list[dict[str, Any]]:
        """Every FaultToleranceRequest vLLM's router handed to the engine client."""
        return self.request("GET", "/peer/handled").json()

    def status_doc(self) -> dict[str, Any]:
        return self.request("GET", f"{FT_PREFIX}/status").json()


@dataclass
class StartingPeer:
    """A peer process launched and not yet known to serve: `ready()` waits for its ready file."""

    proc: ManagedProcess
    rank: int
    host: str
    ready_file: Path

    def ready(self) -> Peer:
        try:
            doc = self.proc.wait_ready_file(self.ready_file, PEER_READY_TIMEOUT_SEC, required_keys=("port", "pid"))
        except BaseException:
            self.proc.stop(grace_sec=2)
            raise
        return Peer(self.proc, self.rank, self.host, int(doc["port"]))


def launch_peer(python: str, rank: int, host: str, run_dir: Path, *, plain_fastapi_errors: bool = False) -> StartingPeer:
    """Starts the process and returns at once, so that several peers import vLLM side by side."""
    ready = run_dir / "ready.json"
    argv = [python, str(SERVE_PY), "--dp-rank", str(rank), "--host", host, "--port", "0", "--ready-file", str(ready)]
    if plain_fastapi_errors:
        argv.append("--plain-fastapi-errors")
    proc = start_process(argv, log_path=run_dir / "peer.log", name=f"vllm-peer-rank{rank}", cwd=REPO)
    return StartingPeer(proc, rank, host, ready)
