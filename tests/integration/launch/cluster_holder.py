"""A process that holds a small LocalCluster the way `motor demo` does (inside exit_on_sigterm, with
``finally: cluster.stop()``), for the SIGTERM test. Not a test itself:

    python cluster_holder.py RUN_DIR

Starts DP=2 on one pod, tries a second start (which must be refused), prints one JSON line
``{"serving": [...], "second_start": "<error>"}`` once the instance serves, then waits for a signal.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from motor.launch.cluster import LocalCluster
from motor.launch.shutdown import exit_on_sigterm
from motor.launch.spec import ClusterSpec


def hold(run_dir: Path) -> None:
    cluster = LocalCluster(ClusterSpec(dp_size=2, ranks_per_pod=2, first_pod_ip=60), run_dir)
    try:
        cluster.start(ready_timeout_sec=150)
        try:
            cluster.start()
            second = ""
        except RuntimeError as exc:
            second = str(exc)
        runtime = cluster.runtime() or {}
        print(json.dumps({"serving": runtime.get("alive_dp_ranks"), "second_start": second}), flush=True)
        while True:
            signal.pause()
    finally:
        cluster.stop()


if __name__ == "__main__":
    with exit_on_sigterm():
        hold(Path(sys.argv[1]))
