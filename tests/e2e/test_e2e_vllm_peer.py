"""A real Motor cluster whose engines are vLLM 0.33.0's own FT router (tests/vllm_peer/serve.py).

vLLM 0.33.0 knows only `retry`: the Controller's scale-down apply is refused (400 "Invalid
instruction"), the round aborts cleanly (finalize abort to every guarded NodeManager) and the
whole-instance reconfiguration relaunches every engine. The peer has no OpenAI API, so there is no
inference here; the engines' relaunch is checked by their pids and their status after it.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from .watch import LastErrors, strategies, wait_reconfigured

from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc

pytestmark = pytest.mark.timeout(540)

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SERVE_PY = REPO / "tests" / "vllm_peer" / "serve.py"
PEER_COMMAND = [str(VLLM_PYTHON), str(SERVE_PY), "--dp-rank", "{dp_rank}", "--host", "{host}", "--port", "{port}",
                "--dp-size", "{dp_size}"]
FAST = {
    "fault_tolerance_config.software_status_collection_timeout_sec": 6.0,
    "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec": 8.0,
    # Four peers import vLLM at once on two cores when the reconfiguration relaunches them.
    "reconfiguration_timeout_sec": 240.0,
}
REFUSAL = "Invalid instruction: 'scale_down'."


def engines(cluster) -> dict[int, node_manager_pb2.EngineProcess]:
    out = {}
    for pod_ip, svc in cluster.nodemanagers.items():
        with cluster.grpc_channel(f"{pod_ip}:{svc.info['grpc_port']}") as channel:
            pod = node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(),
                                                                               timeout=5)
        out.update({e.endpoint.id: e for e in pod.engines})
    return out


def peer_call(url: str, path: str, doc: Any = None) -> Any:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def push(cluster, artifacts, rank: int, status: str) -> None:
    url = cluster.engine_url(rank)
    answer = peer_call(url, "/peer/state", {"status": status})
    artifacts.data["injections"].append({"rank": rank, "fault": f"vllm peer status push {status}",
                                        "command": f"POST {url}/peer/state", "answer": answer})


@pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                    reason="the side venv .venv-vllm is absent: run `make .venv-vllm/.installed` (part of `make deps`)")
def test_scale_down_refused_by_vllm_router_falls_back_to_reconfiguration(start_cluster, artifacts) -> None:
    cluster = start_cluster(
        engine_command=PEER_COMMAND, controller_overrides=FAST,
        nodemanager_overrides={"engine_ft_api_prefix": "/fault_tolerance", "engine_ready_timeout_sec": 180.0},
    )
    before = engines(cluster)
    assert sorted(before) == [0, 1, 2, 3] and all(e.running and e.pid for e in before.values())
    watch = LastErrors(cluster, cluster.spec.instance_id)
    try:
        # An executor death on rank 1 as vLLM reports it: rank 1 dead, the survivors unhealthy.
        push(cluster, artifacts, 1, "dead")
        for rank in (0, 2, 3):
            push(cluster, artifacts, rank, "unhealthy")
        rt = wait_reconfigured(cluster, 300.0)
    finally:
        watch.close()
    data = artifacts.collect(cluster)
    artifacts.record("last_errors_seen", watch.values)
    timeline = data["controller_timeline"]
    assert strategies(data) == [("dp_scale_down", "failed"), ("instance_reconfiguration", "succeeded")]
    round_txn = timeline[0]
    assert REFUSAL in round_txn["outcome"], round_txn["outcome"]
    events = round_txn["events"]

    decision = next(e for e in events if e["event_kind"] == "DECISION" and e["name"] == "scale_down")
    assert decision["ranks"] == [1] and decision["unhealthy_ranks"] == [0, 2, 3]

    # One apply per pod with survivors, never retried; every survivor's engine refused it.
    applies = [e for e in events if e["event_kind"] == "CALL" and e["name"] == "apply"]
    assert len(applies) == 2, applies
    results = [r for e in applies for r in e["apply_results"]]
    assert sorted(r["endpoint_id"] for r in results) == [0, 2, 3]
    for r in results:
        assert r["http_status"] == 400 and r["accepted"] is False, r
        assert r["message"] == f"HTTP 400: {REFUSAL}", r
        assert r["engine_request_id"] == ""
        assert json.loads(r["request_body"])["instruction"] == "scale_down"

    # Clean abort: finalize(commit=false) to every guarded NodeManager, and nothing committed.
    guarded = sorted(e["target"] for e in events if e["event_kind"] == "CALL" and e["name"] == "guard")
    finalizes = [e for e in events if e["event_kind"] == "CALL" and e["name"] == "finalize"]
    assert sorted(e["target"] for e in finalizes) == guarded and len(guarded) == 2
    assert all(e["commit"] is False for e in finalizes)
    assert data["dead_committed"] == []

    # The engine's message reached the runtime's last_error (cleared again by the reconfiguration).
    assert any(REFUSAL in value for value in watch.values), watch.values
    assert rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["last_error"] is None
    assert data["coordinator_endpoints"] == {cluster.spec.instance_id: [0, 1, 2, 3]}

    # The reconfiguration relaunched every peer process; each is a fresh, healthy engine.
    after = engines(cluster)
    assert all(after[r].running and after[r].pid and after[r].pid != before[r].pid for r in range(4)), (before, after)
    for rank in range(4):
        doc = peer_call(cluster.engine_url(rank), "/fault_tolerance/status")
        assert doc["engines"] == [{"id": rank, "status": "healthy"}], doc
