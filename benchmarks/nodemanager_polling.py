"""CPU cost of the NodeManager's engine FT-status polling (RFC §8: "status query overhead with the
feature on, no fault", against the feature-off baseline).

For each N (default 1, 8, 16) a real ``motor-nodemanager`` process supervises N local "engines" and
polls their FT status every ``engine_status_poll_interval_sec`` (1 s, the default). The engines'
HTTP APIs are N light fake engines served by ONE helper process (motor.testing.fake_engine),
so the measurement is not drowned by N torch processes; the supervised processes themselves are
``sleep`` placeholders (the NodeManager still launches, watches and health-checks them). A recording
Controller peer (in this process) answers Register/Heartbeat.

Measured: CPU seconds (user+system) of the NodeManager process only, per wall second, over a
window after warm-up, via psutil; once with polling on (fault tolerance on) and once with it off
(``fault_tolerance_config.enable_fault_tolerance=false``: the baseline, heartbeat and process
watching only). The helper's status-request counter confirms the achieved polling rate.

    .venv/bin/python benchmarks/nodemanager_polling.py [--ns 1,8,16] [--window-sec 20] [--warmup-sec 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from motor.common.ports import free_ports
from motor.common.process import ManagedProcess, start_process
from motor.testing.fake_controller import FakeController
from motor.testing.waits import wait_for

HOST = "127.0.0.1"
BIN = Path(sys.executable).parent


@dataclass
class Result:
    n: int
    polling: bool
    cpu_sec: float
    wall_sec: float
    status_requests: int

    @property
    def cpu_per_wall(self) -> float:
        return self.cpu_sec / self.wall_sec

    @property
    def polls_per_sec(self) -> float:
        return self.status_requests / self.wall_sec


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _status_requests(ports: list[int]) -> int:
    return sum(_get_json(f"http://{HOST}:{p}/fake/stats")["status_requests"] for p in ports)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def run_one(n: int, polling: bool, window_sec: float, warmup_sec: float, run_dir: Path) -> Result:
    ports = free_ports(n, HOST)
    helper: ManagedProcess | None = None
    nm: ManagedProcess | None = None
    controller = FakeController(proxy_enabled=polling, heartbeat_interval_sec=2.0)
    controller.start()
    try:
        helper = start_process(
            [sys.executable, "-m", "motor.testing.fake_engine", "--host", HOST,
             "--ports", ",".join(map(str, ports)), "--ranks", ",".join(map(str, range(n)))],
            log_path=run_dir / f"fake-engines-n{n}.log", name="fake-engines",
        )
        for p in ports:
            helper.wait_http_ok(f"http://{HOST}:{p}/health", 30)
        sleep_bin = shutil.which("sleep") or "/bin/sleep"
        config = {
            "controller_address": controller.address, "instance_id": 1, "dp_size": n, "pod_ip": HOST,
            "server": {"host": HOST, "port": 0},
            "engines": [{"dp_rank": r, "port": p} for r, p in enumerate(ports)],
            "engine_command": [sleep_bin, "3600"],
            "dp_master_ip": HOST, "dp_master_port": 0,
            "log_dir": str(run_dir / f"engines-n{n}-{'on' if polling else 'off'}"),
            "fault_tolerance_config": {"enable_fault_tolerance": polling, "enable_dp_scale_down": polling,
                                       "engine_status_poll_interval_sec": 1.0},
        }
        cfg_path = run_dir / f"nm-n{n}-{'on' if polling else 'off'}.json"
        cfg_path.write_text(json.dumps(config))
        ready = cfg_path.with_suffix(".ready")
        nm = start_process([str(BIN / "motor-nodemanager"), "--config", str(cfg_path), "--ready-file", str(ready),
                            "--log-level", "WARNING"],
                           log_path=run_dir / f"nodemanager-n{n}-{'on' if polling else 'off'}.log", name="nm")
        nm.wait_ready_file(ready, 30, required_keys=["grpc_port"])
        wait_for(lambda: controller.registers, 60, "registration")
        time.sleep(warmup_sec)
        proc = psutil.Process(nm.pid)
        requests0, cpu0, t0 = _status_requests(ports), _cpu(proc), time.monotonic()
        time.sleep(window_sec)
        requests1, cpu1, t1 = _status_requests(ports), _cpu(proc), time.monotonic()
        return Result(n, polling, cpu1 - cpu0, t1 - t0, requests1 - requests0)
    finally:
        if nm is not None:
            nm.stop(grace_sec=15)
        if helper is not None:
            helper.stop(grace_sec=5)
        controller.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="1,8,16", help="comma-separated engine counts")
    parser.add_argument("--window-sec", type=float, default=20.0)
    parser.add_argument("--warmup-sec", type=float, default=3.0)
    parser.add_argument("--run-dir", type=Path, default=None, help="logs and configs (default: a temp dir)")
    args = parser.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="motor-nm-bench-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"# NodeManager polling CPU: python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, window {args.window_sec:g}s after {args.warmup_sec:g}s warm-up; logs in {run_dir}")
    print(f"{'N':>3} {'polling':>8} {'CPU s/s':>9} {'CPU %':>7} {'polls/s':>8} {'extra CPU ms/poll':>18}")
    for n in ns:
        off = run_one(n, False, args.window_sec, args.warmup_sec, run_dir)
        on = run_one(n, True, args.window_sec, args.warmup_sec, run_dir)
        for r in (off, on):
            extra = ""
            if r.polling and r.status_requests:
                extra = f"{(on.cpu_per_wall - off.cpu_per_wall) * 1000 / on.polls_per_sec:.3f}"
            print(f"{r.n:>3} {'on' if r.polling else 'off':>8} {r.cpu_per_wall:>9.4f} {100 * r.cpu_per_wall:>6.2f}% "
                  f"{r.polls_per_sec:>8.2f} {extra:>18}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
