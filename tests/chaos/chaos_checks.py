"""What every chaos row checks, from the outside: what the engines were sent (their own apply
journals), what etcd holds (read directly), what the Controller reports and the Coordinator routes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from motor.launch.cluster import LocalCluster

# The pods' loopback addresses of the chaos rows: apart from the e2e rows' (127.0.0.2 on), so that
# `make test` runs both tiers at once. POD_0 hosts ranks 0 and 1, POD_1 ranks 2 and 3.
CHAOS_FIRST_POD_IP = 40
POD_0 = f"127.0.0.{CHAOS_FIRST_POD_IP}"
POD_1 = f"127.0.0.{CHAOS_FIRST_POD_IP + 1}"


def scale_down_applies(cluster: LocalCluster) -> dict[str, Counter[int]]:
    """request_id → how many scale_down applies each rank's engines received for it (every engine
    incarnation of the rank: the journal outlives relaunches)."""
    rounds: dict[str, Counter[int]] = {}
    for rank in range(cluster.spec.dp_size):
        for entry in cluster.engine_applies(rank):
            if entry.get("instruction") == "scale_down":
                rounds.setdefault(entry["request_id"], Counter())[rank] += 1
    return rounds


def assert_at_most_one_apply_per_survivor_per_round(cluster: LocalCluster) -> dict[str, dict[int, int]]:
    rounds = scale_down_applies(cluster)
    repeated = {rid: {r: n for r, n in ranks.items() if n > 1} for rid, ranks in rounds.items()}
    assert not any(repeated.values()), f"an apply was replayed: {repeated}"
    return {rid: dict(ranks) for rid, ranks in rounds.items()}


def assert_store_matches(cluster: LocalCluster, runtime: dict[str, Any]) -> dict[str, Any]:
    """etcd holds exactly what the leader reports: phase, generation and dead_committed."""
    view = cluster.etcd_view()
    record = view["record"]
    assert record is not None, "etcd holds no record of the instance"
    assert (record["phase"], record["generation"], sorted(record["dead_committed"])) == (
        runtime["phase"], runtime["generation"], sorted(runtime["dead_committed"])), (record, runtime)
    return view


def assert_serving(cluster: LocalCluster, runtime: dict[str, Any]) -> None:
    """Serving the alive ranks: the Coordinator routes to exactly them, and a completion goes through."""
    assert runtime["can_serve"], runtime
    assert cluster.published() == {cluster.spec.instance_id: runtime["alive_dp_ranks"]}
    result = cluster.load_generator(concurrency=1, max_tokens=4).send_one("after the chaos")
    assert result.ok, result.error


def new_transactions(cluster: LocalCluster, since_unix_sec: float) -> list[dict[str, Any]]:
    """Transactions the leader started after `since_unix_sec`."""
    return [t for t in cluster.timeline() if t["started_at_unix_sec"] >= since_unix_sec]


def describe_pod(cluster: LocalCluster, pod_ip: str) -> Any:
    """The NodeManager's own description of its pod (engines, retired flags, the guard it holds)."""
    from gen.motor.v1 import node_manager_pb2, node_manager_pb2_grpc

    svc = cluster.nodemanagers[pod_ip]
    with cluster.grpc_channel(f"{pod_ip}:{svc.info['grpc_port']}") as channel:
        return node_manager_pb2_grpc.NodeManagerStub(channel).DescribePod(node_manager_pb2.DescribePodRequest(),
                                                                          timeout=5)


def retired_ranks(cluster: LocalCluster, pod_ip: str) -> list[int]:
    return sorted(e.endpoint.id for e in describe_pod(cluster, pod_ip).engines if e.retired)


def guards_held(cluster: LocalCluster, pods: list[str] | None = None) -> dict[str, str]:
    """pod ip → the request id holding its guard (pods holding none are left out), of `pods` (all)."""
    held = {ip: describe_pod(cluster, ip).guard_request_id for ip in (pods or cluster.nodemanagers)}
    return {ip: rid for ip, rid in held.items() if rid}
