"""A live local Motor cluster for the TypeScript client tests (and for trying the example by hand).

    .venv/bin/python clients/typescript/test/cluster_fixture.py --ready-file /tmp/ready.json

Starts a LocalCluster: controller (in-memory store), coordinator with a management key, two
NodeManagers on 127.0.0.2 and 127.0.0.3 hosting two reference-engine ranks each of one DP=4
instance (id 1). Once it serves, writes the ready file (JSON: controller and coordinator gRPC
addresses, their HTTP bases, the management key, the instance id, the run directory, this pid).

Control channel: one command per line on stdin, one JSON answer per line on stdout:

    inject-dead <rank>   kill the executor of <rank> (its engine status becomes DEAD) and send one
                         request through the Coordinator, so the survivors run a collective and
                         notice the dead peer (as the e2e tests do)
    ping                 {"ok": true}

Tears everything down on stdin EOF, SIGTERM, SIGINT, or after --max-lifetime-sec, whichever comes
first, so a test runner that dies cannot leave a cluster behind. Logs go to stderr and the run dir.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from motor.launch.cluster import LocalCluster
from motor.launch.load import trigger_traffic
from motor.launch.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[3]

log = logging.getLogger("ts-cluster-fixture")


class Shutdown(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT/the lifetime watchdog."""


def answer(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def handle(cluster: LocalCluster, line: str) -> dict[str, Any]:
    words = line.split()
    if not words:
        return {"ok": False, "error": "empty command"}
    if words == ["ping"]:
        return {"ok": True, "cmd": "ping"}
    if words[0] == "inject-dead" and len(words) == 2 and words[1].isdigit():
        rank = int(words[1])
        if rank not in range(cluster.spec.dp_size):
            return {"ok": False, "cmd": line, "error": f"rank {rank} is not in 0..{cluster.spec.dp_size - 1}"}
        result = cluster.inject(rank, "executor_death")
        trigger_traffic(cluster)
        return {"ok": True, "cmd": line, "rank": rank, "answer": result}
    return {"ok": False, "cmd": line, "error": "unknown command (try: inject-dead <rank>, ping)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="logs of every process (default runs/ts-client-<time>)")
    parser.add_argument("--management-key", default=None, help="Coordinator management key (default: random)")
    parser.add_argument("--max-lifetime-sec", type=float, default=600.0)
    parser.add_argument("--start-timeout-sec", type=float, default=120.0)
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s fixture %(message)s")
    run_dir = args.run_dir or REPO / "runs" / time.strftime(f"ts-client-%Y%m%d-%H%M%S-{os.getpid()}")
    key = args.management_key or secrets.token_urlsafe(18)

    def on_signal(signum: int, _frame: object) -> None:
        raise Shutdown(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.setitimer(signal.ITIMER_REAL, args.max_lifetime_sec)  # watchdog: SIGALRM → Shutdown

    spec = ClusterSpec(
        dp_size=4, ranks_per_pod=2, instance_id=1,
        coordinator_overrides={"management_key": key},
        # The tests publish and withdraw views of their own through Refresh; the Controller's
        # periodic SET (a safety net) would undo them mid-test, so it runs rarely here.
        controller_overrides={"coordinator_management_key": key, "publish_interval_sec": 60.0},
    )
    cluster = LocalCluster(spec, run_dir)
    try:
        started = time.monotonic()
        cluster.start(ready_timeout_sec=args.start_timeout_sec)
        ready = {
            "controller": cluster.controller_address,
            "coordinator": cluster.coordinator_address,
            "controller_http": cluster.controller_http,
            "coordinator_http": cluster.coordinator_http,
            "management_key": key,
            "instance_id": spec.instance_id,
            "dp_size": spec.dp_size,
            "run_dir": str(run_dir),
            "pid": os.getpid(),
            "started_in_sec": round(time.monotonic() - started, 2),
        }
        tmp = args.ready_file.with_name(args.ready_file.name + ".tmp")
        tmp.write_text(json.dumps(ready, indent=2))
        tmp.replace(args.ready_file)  # atomic: a reader never sees half a file
        log.info("cluster serving after %.1fs: %s", ready["started_in_sec"], ready["run_dir"])
        for line in sys.stdin:  # EOF (the test runner closed the pipe or died) ends the loop
            line = line.strip()
            if not line:
                continue
            try:
                answer(handle(cluster, line))
            except Exception as exc:  # noqa: BLE001 - report to the caller, keep serving
                answer({"ok": False, "cmd": line, "error": f"{type(exc).__name__}: {exc}"})
        log.info("stdin closed: tearing down")
    except Shutdown as why:
        log.info("%s: tearing down", why)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not interrupt the teardown
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Teardown itself is bounded; nothing may keep this process alive past it.
        watchdog = threading.Timer(60.0, lambda: os._exit(3))
        watchdog.daemon = True
        watchdog.start()
        cluster.stop()
        args.ready_file.unlink(missing_ok=True)
        log.info("every process stopped")
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
