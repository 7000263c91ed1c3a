"""Fast recovery by `retry` (RFC §4.3 EngineFastRecoveryStrategy, §8 "仅 UNHEALTHY，快恢适用") over
real processes: a transient collective failure (one rank's link flaps under load; every rank ends
UNHEALTHY, none DEAD) is retried in place on the reference engines' real gloo group — one retry per
pod with one request id, no engine restarted, nothing lost after the drain. The same against vLLM
0.33.0's own FT router (tests/vllm_peer/serve.py). With fast recovery off the same fault takes the
RFC's wait then reconfiguration: test_e2e_fallback.py::test_all_unhealthy_fast_recovery_not_applicable.

Pods on 127.0.0.90.. (this file's own block)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc
from motor.testing.waits import wait_for

from .test_e2e_vllm_peer import PEER_COMMAND, VLLM_PYTHON, peer_call, push

pytestmark = pytest.mark.timeout(300)

FIRST_POD_IP = 90
# A long collection window: a wait-then-reconfigure would show as a reconfiguration much later;
# fast recovery decides on the complete all-UNHEALTHY snapshot at once.
ON = {
    "fault_tolerance_config.enable_fast_recovery": True,
    "fault_tolerance_config.software_status_collection_timeout_sec": 60.0,
    "fault_tolerance_config.fast_recovery_config.allowed_fault_infos": ["RuntimeError"],
}


def engine_pids(cluster) -> dict[int, int]:
    """Each rank's engine process as its NodeManager runs it (DescribePod)."""
    out = {}
    for pod_ip, svc in cluster.nodemanagers.items():
        with cluster.grpc_channel(f"{pod_ip}:{svc.info['grpc_port']}") as channel:
            pod = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(),
                                                                               timeout=5)
        out.update({e.endpoint.id: e.pid for e in pod.engines if e.running})
    return out


def executor_pids(cluster) -> dict[int, int]:
    """The reference engine's executor (its EngineCore) per rank: a rebuild in place keeps it."""
    out = {}
    for rank in range(cluster.spec.dp_size):
        with urllib.request.urlopen(cluster.engine_url(rank) + "/motor/admin/state", timeout=5) as resp:
            out[rank] = json.load(resp)["executor_pid"]
    return out


def _fast_recovered(cluster):
    def done(rt: dict[str, Any]) -> bool:
        return rt["phase"] == "NORMAL" and rt["serving_published"] and any(
            t["strategy"] == "fast_recovery" and t["outcome"] == "succeeded" for t in cluster.timeline())
    return done


def _calls(txn: dict, name: str) -> list[dict]:
    return [e for e in txn["events"] if e["event_kind"] == "CALL" and e["name"] == name]


def _assert_one_retry(txn: dict, engine_ids_are_ours: bool, ranks: list[int]) -> None:
    decision = next(e for e in txn["events"] if e["event_kind"] == "DECISION")
    assert decision["name"] == "fast_recovery" and decision["unhealthy_ranks"] == ranks, decision
    applies = _calls(txn, "apply")
    assert len(applies) == 2 and all(a["outcome"] == "ok" for a in applies), applies  # one per pod
    results = [r for a in applies for r in a["apply_results"]]
    assert sorted(r["endpoint_id"] for r in results) == ranks
    for r in results:
        assert r["http_status"] == 202 and r["accepted"], r
        assert json.loads(r["request_body"]) == {"instruction": "retry", "request_id": txn["request_id"], "params": {}}
        assert (r["engine_request_id"] == txn["request_id"]) is engine_ids_are_ours, r
    finalizes = _calls(txn, "finalize")
    assert len(finalizes) == 2 and all(f["commit"] is True and not f.get("endpoint_ids") for f in finalizes)
    phases = [e["name"] for e in txn["events"] if e["event_kind"] == "PHASE"]
    assert phases == ["FAST_RECOVERING", "NORMAL"], phases


def test_transient_fault_under_load_is_retried_in_place(start_cluster, artifacts) -> None:
    cluster = start_cluster(first_pod_ip=FIRST_POD_IP, controller_overrides=ON)
    pids, executors = engine_pids(cluster), executor_pids(cluster)
    assert sorted(pids) == [0, 1, 2, 3]
    load = cluster.load_generator(concurrency=4, max_tokens=8, max_duration_sec=120).start()
    try:
        wait_for(lambda: load.counts()["succeeded"] >= 8, 60.0, "8 completions under load")
        injected_at = time.time()
        # One rank's link flaps: its peers' next collective fails, so every rank diagnoses and ends
        # UNHEALTHY ("RuntimeError"), none DEAD.
        artifacts.injection(cluster, 1, "unhealthy", reason="injected link flap")
        rt = cluster.wait_until(_fast_recovered(cluster), 90.0, "fast recovery by retry")
        recovered_at = time.time()
        wait_for(lambda: len([r for r in load.snapshot() if r.started_sec > recovered_at]) >= load.concurrency,
                 60.0, "requests answered after the recovery")
    finally:
        load.stop()
    data = artifacts.collect(cluster)
    timeline = data["controller_timeline"]
    assert [(t["strategy"], t["outcome"]) for t in timeline] == [("fast_recovery", "succeeded")], timeline
    txn = timeline[0]
    _assert_one_retry(txn, engine_ids_are_ours=True, ranks=[0, 1, 2, 3])
    evidence = [e for e in txn["events"] if e["event_kind"] == "EVIDENCE"]
    assert {e["evidence_kind"] for e in evidence} == {"UNHEALTHY"}
    # No engine restarted: the engine processes and their executors are the same.
    assert engine_pids(cluster) == pids and executor_pids(cluster) == executors
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["dead_committed"] == [] and rt["last_error"] is None
    assert data["coordinator_endpoints"] == {cluster.spec.instance_id: [0, 1, 2, 3]}
    # Nothing lost after the drain: every request sent once the view was withdrawn was answered.
    drained_at = _calls(txn, "drain")[0]["at_unix_sec"]
    published_at = _calls(txn, "publish")[0]["at_unix_sec"]
    after = [r for r in load.snapshot() if r.started_sec >= drained_at]
    counts = load.counts()
    artifacts.record("load", counts)
    artifacts.record("fault_to_published_sec", round(published_at - injected_at, 3))
    artifacts.record("drain_to_published_sec", round(published_at - drained_at, 3))
    assert after and all(r.ok for r in after), [(r.status, r.error) for r in after if not r.ok]
    for r in (cluster.load_generator(concurrency=1, max_tokens=4).send_one(f"after retry {i}") for i in range(4)):
        artifacts.data["inference_after_recovery"].append({"status": r.status, "rank": r.rank, "error": r.error})
        assert r.ok, r.error


@pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                    reason="the side venv .venv-vllm is absent: run `make .venv-vllm/.installed` (part of `make deps`)")
def test_vllm_router_retry_recovers_every_engine_in_place(start_cluster, artifacts) -> None:
    # Two pods of one peer each: every peer imports vLLM (about 30 s on two cores), and two show
    # the same as four (one retry per pod, vLLM's own request ids).
    cluster = start_cluster(
        first_pod_ip=FIRST_POD_IP + 4, dp_size=2, ranks_per_pod=1, engine_command=PEER_COMMAND,
        controller_overrides=ON,
        nodemanager_overrides={"engine_ft_api_prefix": "/fault_tolerance", "engine_ready_timeout_sec": 180.0},
    )
    pids = engine_pids(cluster)
    # A transient collective failure as vLLM reports it: every engine unhealthy ("RuntimeError").
    for rank in range(2):
        push(cluster, artifacts, rank, "unhealthy")
    rt = cluster.wait_until(_fast_recovered(cluster), 90.0, "fast recovery by vLLM's retry")
    data = artifacts.collect(cluster)
    timeline = data["controller_timeline"]
    assert [(t["strategy"], t["outcome"]) for t in timeline] == [("fast_recovery", "succeeded")], timeline
    # vLLM 0.33.0 makes its own request id for every command: the 202s name it, not ours.
    _assert_one_retry(timeline[0], engine_ids_are_ours=False, ranks=[0, 1])
    assert engine_pids(cluster) == pids
    assert rt["alive_dp_ranks"] == [0, 1] and rt["last_error"] is None
    assert data["coordinator_endpoints"] == {cluster.spec.instance_id: [0, 1]}
    for rank in range(2):
        doc = peer_call(cluster.engine_url(rank), "/fault_tolerance/status")
        assert doc["engines"] == [{"id": rank, "status": "healthy"}], doc
        handled = peer_call(cluster.engine_url(rank), "/peer/handled")
        retries = [h for h in handled if h["instruction"] == "retry"]
        assert len(retries) == 1 and retries[0]["success"] and retries[0]["params"] == {}, handled
