"""Capacity restoration over real processes (pods on 127.0.0.110/.111): ranks 1 then 0 removed under
load empty pod 127.0.0.110, which is told to stop. Manual row: MindCluster's replacement pod comes
up at 127.0.0.112 (fresh log_dir, `replacement_pod`), is taken in place of the stopped one with no
reconfiguration, and `motorctl restore 1` brings every original rank back on it. Auto row: the
stopped pod's NodeManager restarted in place (the shipped StatefulSet's restart, same log_dir)
launches none of the committed ranks, causes no reconfiguration, and the instance restores itself.
Scale-up row: the pods declare scale_up, so the restoration re-admits ranks 0 and 1 as joiners into
the running survivors' group. No request fails in any."""

from __future__ import annotations

import io
import time

import pytest
from .watch import counter

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc
from motor.cli.motorctl import run as motorctl
from motor.testing.waits import wait_for

pytestmark = pytest.mark.timeout(240)

ROUND_SEC = 60.0
RESTORE_SEC = 120.0
EMPTIED, REPLACEMENT = "127.0.0.110", "127.0.0.112"
STAGES = ("restore", "RECONFIGURING", "pause", "in_flight_finished", "drain", "stop_engines", "start_engines",
          "NORMAL", "publish")


def _remove_ranks_1_then_0(cluster, artifacts, load) -> None:
    wait_for(lambda: load.counts()["succeeded"] >= 8, 60.0, "8 completions under load")
    artifacts.injection(cluster, 1, "executor_death")
    cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
    artifacts.injection(cluster, 0, "executor_death")
    cluster.wait_serving(ROUND_SEC, alive=[2, 3])
    assert cluster.nodemanagers[EMPTIED].proc.wait_exit(30) == 0  # told to stop: the pod is emptied


def _pod_back_in_place(cluster) -> None:
    """The StatefulSet restarts the stopped container: same pod, same log_dir (the stop record)."""
    cluster.restart_nodemanager(EMPTIED)
    described = cluster.describe_pod(0)
    assert [(e.endpoint.id, e.running, e.retired) for e in described.engines] == [(0, False, True), (1, False, True)]


def _restoration(cluster) -> dict:
    txns = [t for t in cluster.timeline() if t["strategy"] == "capacity_restore"]
    assert len(txns) == 1 and txns[0]["outcome"] == "succeeded", txns
    names = [e["name"] for e in txns[0]["events"]]
    assert all(stage in names for stage in STAGES), names
    assert names.index("pause") < names.index("drain") < names.index("stop_engines") < names.index("publish")
    return txns[0]


def _after_restore(cluster, artifacts, load) -> None:
    cluster.wait_serving(RESTORE_SEC, alive=[0, 1, 2, 3])
    rt = cluster.wait_until(lambda r: r["capacity_restore"] == "", 30.0, "the restoration over")
    assert rt["phase"] == "NORMAL" and rt["dead_committed"] == [] and rt["alive_dp_ranks"] == [0, 1, 2, 3]
    assert cluster.published() == {1: [0, 1, 2, 3]}
    since = time.time()
    wait_for(lambda: {r.rank for r in load.snapshot() if r.started_sec > since and r.ok} >= {0, 1}, 60.0,
             "the restored ranks 0 and 1 answer inference")
    load.stop()
    counts = load.counts()
    artifacts.record("load", counts)
    assert counts["failed"] == 0, counts
    strategies = [t["strategy"] for t in cluster.timeline()]
    assert "instance_reconfiguration" not in strategies, strategies  # no accidental one, no fallback


def test_manual_restore_after_ranks_1_then_0_onto_a_replacement_pod(start_cluster, artifacts) -> None:
    cluster = start_cluster(first_pod_ip=110, enable_dp_scale_up=True,
                            controller_overrides={"capacity_restore.mode": "manual",
                                                  "capacity_restore.in_flight_finish_sec": 5.0})
    cluster.nodemanagers[EMPTIED].expected_exit = True
    load = cluster.load_generator(concurrency=2, max_tokens=8, max_duration_sec=200).start()
    try:
        _remove_ranks_1_then_0(cluster, artifacts, load)
        svc = cluster.replace_pod(EMPTIED, REPLACEMENT)
        with cluster.grpc_channel(f"{REPLACEMENT}:{svc.info['grpc_port']}") as channel:
            described = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(
                node_manager_pb2.DescribePodRequest(), timeout=10)
        assert [(e.endpoint.id, e.running, e.retired) for e in described.engines] == [(0, False, True), (1, False, True)]
        log = cluster.run_dir / "controller.log"
        wait_for(lambda: f"pod={REPLACEMENT} replaces pod {EMPTIED}" in log.read_text(), 30.0,
                 "the Controller takes the replacement pod")
        # The replacement causes no reconfiguration and, the policy not being auto, no restoration:
        # two periodic SETs later the instance still serves on its survivors.
        sets = counter(cluster, "motor_publications_total", event="SET")
        wait_for(lambda: counter(cluster, "motor_publications_total", event="SET") >= sets + 2, 30.0, "two SETs")
        rt = cluster.runtime()
        assert (rt["phase"], rt["dead_committed"], rt["capacity_restore"]) == ("SCALED_DOWN_RUNNING", [0, 1], "")
        assert cluster.published() == {1: [2, 3]}

        out = io.StringIO()
        code = motorctl(["--controller", cluster.controller_address, "restore", "1", "--deadline", "120"], out=out)
        artifacts.record("motorctl_restore", out.getvalue())
        assert code == 0, out.getvalue()
        assert out.getvalue().splitlines()[-1].startswith("instance 1 restored")
        _after_restore(cluster, artifacts, load)
    finally:
        load.stop()
    txn = _restoration(cluster)
    starts = [e for e in txn["events"] if e["name"] == "start_engines"]
    assert sorted(e["target"].split(":")[0] for e in starts) == ["127.0.0.111", REPLACEMENT]


def test_auto_restores_by_itself_once_the_pod_is_back(start_cluster, artifacts) -> None:
    cluster = start_cluster(engines="light", first_pod_ip=110, enable_dp_scale_up=True,
                            controller_overrides={"capacity_restore.mode": "auto", "capacity_restore.settle_sec": 4.0,
                                                  "capacity_restore.in_flight_finish_sec": 5.0})
    cluster.nodemanagers[EMPTIED].expected_exit = True
    load = cluster.load_generator(concurrency=2, max_tokens=8, max_duration_sec=200).start()
    try:
        _remove_ranks_1_then_0(cluster, artifacts, load)
        rt = cluster.wait_until(lambda r: r["capacity_restore"] == "restore_pending" and
                                r["restore_unplaced_ranks"] == [0, 1], 30.0, "restore_pending without places")
        assert EMPTIED in rt["restore_waiting_for"] and rt["phase"] == "SCALED_DOWN_RUNNING"
        _pod_back_in_place(cluster)
        _after_restore(cluster, artifacts, load)
    finally:
        load.stop()
    txn = _restoration(cluster)
    assert "capacity_restore auto" in next(e["detail"] for e in txn["events"] if e["name"] == "restore")


def test_scale_up_readmits_ranks_1_and_0_without_restarting_the_survivors(start_cluster, artifacts) -> None:
    """The reference engine declares scale_up: `motorctl restore 1` starts ranks 0 and 1 as joiners on
    the pod back in place and the survivors re-admit them, no engine of theirs restarted."""
    cluster = start_cluster(first_pod_ip=110, enable_dp_scale_up=True,
                            nodemanager_overrides={"ft_capability.supports_scale_up": True},
                            controller_overrides={"capacity_restore.mode": "manual"})
    cluster.nodemanagers[EMPTIED].expected_exit = True
    load = cluster.load_generator(concurrency=2, max_tokens=8, max_duration_sec=200).start()
    try:
        _remove_ranks_1_then_0(cluster, artifacts, load)
        survivors = {e.endpoint.id: e.pid for e in cluster.describe_pod(2).engines}
        assert sorted(survivors) == [2, 3] and all(survivors.values()), survivors
        _pod_back_in_place(cluster)
        out = io.StringIO()
        code = motorctl(["--controller", cluster.controller_address, "restore", "1", "--deadline", "120"], out=out)
        artifacts.record("motorctl_restore", out.getvalue())
        assert code == 0, out.getvalue()
        assert out.getvalue().splitlines()[-1].startswith("instance 1 restored")
        _after_restore(cluster, artifacts, load)
    finally:
        load.stop()
    assert {e.endpoint.id: e.pid for e in cluster.describe_pod(2).engines} == survivors  # not restarted
    txns = [t for t in cluster.timeline() if t["strategy"] in ("scale_up", "capacity_restore")]
    assert [(t["strategy"], t["outcome"]) for t in txns] == [("scale_up", "succeeded")], txns
    names = [e["name"] for e in txns[0]["events"]]
    artifacts.record("scale_up_events", names)
    assert "stop_engines" not in names, names
    starts = [e for e in txns[0]["events"] if e["name"] == "start_engines"]
    assert [e["target"].split(":")[0] for e in starts] == [EMPTIED] and "join [0, 1]" in starts[0]["detail"], starts
    applies = [e for e in txns[0]["events"] if e["name"] == "apply"]
    assert sorted(e["target"].split(":")[0] for e in applies) == [EMPTIED, "127.0.0.111"], applies
    for rank in (0, 1, 2, 3):
        ups = [a for a in cluster.engine_applies(rank) if a["instruction"] == "scale_up"]
        assert len(ups) == 1 and ups[0]["params"]["added_dp_ranks"] == [0, 1], (rank, ups)
