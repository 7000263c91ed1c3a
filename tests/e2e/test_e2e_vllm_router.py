"""Motor publishing to vllm-router (PyPI, Rust): the real router started with no workers, a real
Motor cluster (Controller, Coordinator, NodeManagers on 127.0.0.70/.71, light engines) whose
Controller publishes to both, and completions sent through the router, not the Coordinator.

An executor death under that load: the round's drain takes the instance's workers out of the
router's list before the apply (so the dead rank gets nothing sent after it), the survivors are
back in the list after the commit, and no request sent after the drain fails: the router, run with
the retry budget docs/vllm-router.md recommends, retries it until the survivors are back, as the
Coordinator holds it (it cannot re-infer a stream cut in the middle, which the Coordinator adds). Then the router is restarted with no
workers, as a crashed router comes back, and the Controller's reconcile loop puts the survivors back.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from motor.launch.load import LoadGenerator
from motor.testing.vllm_router import list_workers, router_executable, start_router
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(180)

RECONCILE_SEC = 0.5


class WorkerListPoll:
    """The router's worker list, read every 20 ms in a thread: (wall time the read was sent, list)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, list[str] | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="list-workers", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.time()
            self.samples.append((sent, list_workers(self.url, 1.0)))
            self._stop.wait(0.02)

    def start(self) -> WorkerListPoll:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.skipif(router_executable() is None,
                    reason="vllm-router is absent: run `make .tools/vllm-router-venv/.installed` (part of `make deps`)")
def test_motor_publishes_to_vllm_router_through_a_round_and_a_router_restart(start_cluster, artifacts,
                                                                            run_dir: Path) -> None:
    exe = router_executable()
    assert exe is not None
    router, url = start_router(exe, run_dir / "vllm-router.log")
    try:
        _row(start_cluster, artifacts, run_dir, exe, router, url)
    finally:
        router.stop(grace_sec=5)


def _row(start_cluster, artifacts, run_dir: Path, exe, router, url: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    cluster = start_cluster("light", first_pod_ip=70, controller_overrides={
        "publication.publishers": ["coordinator", "vllm_router"],
        "publication.vllm_routers": [{"url": url, "reconcile_interval_sec": RECONCILE_SEC}],
    })
    workers = sorted(cluster.engine_url(r) for r in range(4))
    survivors = sorted(cluster.engine_url(r) for r in (0, 2, 3))
    assert list_workers(url) == workers, "the assembly's ADD went to the router"
    artifacts.record("router_workers_at_start", workers)
    poll = WorkerListPoll(url).start()
    # A short pause between a worker's requests: while the router has no worker of the instance it
    # answers at once, and a tight loop of refusals would only load the machine.
    load = LoadGenerator(url, concurrency=4, max_tokens=8, max_duration_sec=120, pause_sec=0.02).start()
    try:
        wait_for(lambda: load.counts()["succeeded"] >= 8, 60.0, "8 completions through vllm-router")
        artifacts.injection(cluster, 1, "executor_death")
        cluster.wait_serving(60.0, alive=[0, 2, 3])
        wait_for(lambda: list_workers(url) == survivors, 10.0, "the survivors in the router's list")
        committed_at = time.time()
        wait_for(lambda: len([r for r in load.snapshot() if r.started_sec > committed_at and r.ok]) >= 8, 60.0,
                 "8 completions through vllm-router after the commit")
    finally:
        load.stop()
        poll.stop()
    data = artifacts.collect(cluster)
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    events = txn["events"]
    drain = next(e for e in events if e["name"] == "drain")
    apply = next(e for e in events if e["name"] == "apply")
    publish = next(e for e in events if e["name"] == "publish")
    assert drain["outcome"] == "ok" and sorted(drain["endpoint_ids"]) == [0, 1, 2, 3]
    drained_at = drain["at_unix_sec"] + drain["duration_sec"]
    published_at = publish["at_unix_sec"] + publish["duration_sec"]
    assert drained_at <= apply["at_unix_sec"], "the workers were out of the router before the apply"
    dead = cluster.engine_url(1)
    # The router's own list says the same: no read sent after the drain ended lists the dead rank.
    after_drain = [(t, urls) for t, urls in poll.samples if t > drained_at and urls is not None]
    assert after_drain and all(dead not in urls for _, urls in after_drain)
    results = load.snapshot()
    failed = [r for r in results if not r.ok]
    counts = load.counts()
    artifacts.record("load", counts)
    artifacts.record("failed_requests", [{"started_sec": r.started_sec, "ended_sec": r.ended_sec, "status": r.status,
                                          "error": r.error[:200]} for r in failed])
    artifacts.record("router_samples", len(poll.samples))
    # Only requests in flight on rank 1 when it died may fail; what the survivors refused while
    # diagnosing and rebuilding, and what found the router's list empty, is retried until the commit.
    artifacts.record("failed_after_drain", len([r for r in failed if r.started_sec > drained_at]))
    assert not [r for r in failed if r.started_sec > drained_at], [(r.started_sec, r.error) for r in failed]
    assert not [r for r in results if r.rank == 1 and r.started_sec > drained_at], "the dead rank got traffic"
    assert {r.rank for r in results if r.ok and r.started_sec > published_at} <= {0, 2, 3}
    assert counts["succeeded"] > 0

    # A restarted router comes back with no workers; the reconcile loop puts the survivors back.
    router.stop(grace_sec=5)
    router, _ = start_router(exe, run_dir / "vllm-router-restarted.log", port=port)
    try:
        # It started with no workers (its command line names none); the publisher puts them back: its
        # reconcile loop (counted as repairs) or the periodic SET, whichever runs first.
        wait_for(lambda: list_workers(url) == survivors, 30.0, "the publisher re-added the survivors")
        status = cluster.controller_status(cluster.controller)
        assert status is not None
        routers = [p for p in status["publishers"] if p["kind"] == "vllm_router"]
        assert len(routers) == 1 and routers[0]["up"], routers
        artifacts.record("publishers_after_restart", status["publishers"])
        after = LoadGenerator(url, concurrency=1, max_tokens=4)
        answers = [after.send_one(f"after the router restart {i}") for i in range(4)]
        artifacts.data["inference_after_recovery"].extend({"status": r.status, "rank": r.rank, "error": r.error}
                                                          for r in answers)
        assert all(r.ok for r in answers) and {r.rank for r in answers} <= {0, 2, 3}
    finally:
        router.stop(grace_sec=5)
