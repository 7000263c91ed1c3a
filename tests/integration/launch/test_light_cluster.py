"""A LocalCluster on the light engines: real Controller, Coordinator and NodeManagers over one fake
group process, faults injected with the reference engine's names through `cluster.inject`, and a
teardown that leaves no process behind."""

from __future__ import annotations

from pathlib import Path

import psutil

from motor.launch.cluster import LocalCluster
from motor.launch.engines import LightEngines
from motor.launch.processes import descendant_pids
from motor.launch.spec import ClusterSpec
from motor.testing.fake_group import RECOVERY_FAILED_INFO

# Its own loopback range (127.106.0.0/16), away from the benchmarks' fleets.
INSTANCE_ID = 7


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_light_cluster_scales_down_then_a_failed_vote_kills_the_survivors(tmp_path: Path) -> None:
    spec = ClusterSpec(dp_size=4, ranks_per_pod=2, instance_id=INSTANCE_ID, address_plan="per_instance")
    cluster = LocalCluster(spec, tmp_path, engines=LightEngines(diagnosing_sec=0.2, checkin_sec=5.0))
    pids: set[int] = set()
    try:
        cluster.start(ready_timeout_sec=120)
        assert sorted(cluster.nodemanagers) == ["127.106.0.2", "127.106.0.3"]
        assert cluster.engine_url(3) == "http://127.106.0.3:18001"
        pids = {p.pid for p in [*cluster.nodemanager_processes(), *cluster.engine_processes.values()]}
        pids |= {pid for p in cluster.nodemanager_processes() for pid in descendant_pids(p.pid)}
        placeholder = cluster.engine_pid(1)
        cluster.inject(1, "kill_process")
        rt = cluster.wait_serving(60, alive=[0, 2, 3])
        assert not _running(placeholder), "kill_process takes the placeholder down with the fake API"
        assert rt["dead_committed"] == [1]
        mark = cluster.journal_length()
        answer = cluster.inject(2, "fail_vote", reason="no quorum")
        assert answer["injections"]["fail_vote"] == "no quorum"
        cluster.inject(3, "executor_death")

        def vote_failed() -> bool:
            return {e["rank"] for e in cluster.journal(mark)[1] if e.get("reason") == "vote failed"} == {0, 2}

        cluster.wait_until(lambda _rt: vote_failed(), 60, "the survivors' failed vote")
        status = cluster.engine_client(0).status()["engines"][0]
        assert status["status"] == "dead" and status["fault_info"] == RECOVERY_FAILED_INFO
    finally:
        cluster.stop()
    alive = [p for p in pids if _running(p)]
    assert pids and not alive, f"left running after stop: {alive}"
