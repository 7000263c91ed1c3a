"""vllm-router (PyPI, Rust) as a peer of tests and benchmarks: where `make test` installs it, how to
start it with no workers (Motor publishes them), and a read of its worker list.

    make .tools/vllm-router-venv/.installed   # what `make test` runs among its installs
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from motor.common.ports import free_port
from motor.common.process import ManagedProcess, start_process

ROOT = Path(__file__).resolve().parents[2]
ROUTER_VENV = ROOT / ".tools" / "vllm-router-venv"
# The Makefile's ROUTER_VERSION (tests/unit/test_vllm_router_pin.py keeps the two equal).
ROUTER_VERSION = "0.1.17"
HOST = "127.0.0.1"
# The retry budget docs/vllm-router.md recommends beside Motor (about 29 s of backoff: a round's
# execution deadline): a request the router finds no worker for, or a survivor answers 503 for while
# it rebuilds, is retried until the survivors are published again, as the Coordinator holds it.
HOLD_RETRY_ARGS = ("--retry-max-retries", "60", "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "500")


def router_executable(venv: Path = ROUTER_VENV) -> Path | None:
    exe = venv / "bin" / "vllm-router"
    return exe if exe.exists() else None


def list_workers(url: str, timeout_sec: float = 2.0) -> list[str] | None:
    """The router's worker URLs, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/list_workers", timeout=timeout_sec) as resp:
            return sorted(json.load(resp)["urls"])
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return None


def start_router(exe: Path, log_path: Path, port: int | None = None, worker_urls: list[str] = (),
                 ready_timeout_sec: float = 60.0, extra_args: list[str] = HOLD_RETRY_ARGS
                 ) -> tuple[ManagedProcess, str]:
    """Starts vllm-router on HOST (round robin, the recommended retry budget unless `extra_args`
    says otherwise; `worker_urls` on its command line, none by default) and waits until its worker
    API answers; (process, base URL)."""
    port = port or free_port(HOST)
    metrics_port = free_port(HOST)
    argv = [str(exe), "--host", HOST, "--port", str(port), "--policy", "round_robin",
            "--prometheus-host", HOST, "--prometheus-port", str(metrics_port), *extra_args]
    if worker_urls:
        argv += ["--worker-urls", *worker_urls]
    proc = start_process(argv, log_path=log_path, name="vllm-router")
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + ready_timeout_sec
    while list_workers(url, 1.0) is None:
        if proc.returncode is not None:
            raise RuntimeError(f"vllm-router exited with {proc.returncode}:\n{proc.log_tail()}")
        if time.monotonic() >= deadline:
            proc.stop(grace_sec=2)
            raise TimeoutError(f"vllm-router's /list_workers not answering within {ready_timeout_sec:g}s:\n"
                               f"{proc.log_tail()}")
        time.sleep(0.1)
    return proc, url
