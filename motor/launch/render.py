"""The configuration files of a local cluster's services, rendered from its `ClusterSpec`: pure
functions of the spec and of the addresses already known (no process, file or socket here).

The engine-specific part of a NodeManager's config (its engines, their command and flags) comes
from the engine backend (`motor.launch.engines`) as a dict of top-level keys; the spec's own
overrides are applied last, so a test can change any key of any service.
"""

from __future__ import annotations

from typing import Any

from motor.common.config.loader import set_dotted
from motor.launch.spec import ClusterSpec, PodPlan, PortsPlan

LOOPBACK = "127.0.0.1"


def _listen(host: str = LOOPBACK) -> dict[str, Any]:
    return {"host": host, "port": 0}


def _override(cfg: dict[str, Any], *overrides: dict[str, Any]) -> dict[str, Any]:
    for mapping in overrides:
        for key, value in mapping.items():
            set_dotted(cfg, key, value)
    return cfg


def coordinator_config(spec: ClusterSpec, security: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"server": _listen(), "http": _listen()}
    if security is not None:
        cfg["security"] = security
    return _override(cfg, spec.coordinator_overrides)


def controller_config(spec: ClusterSpec, index: int, *, coordinator_address: str, store_endpoints: list[str],
                      store_key_prefix: str, security: dict[str, Any] | None = None) -> dict[str, Any]:
    """Replica `index`'s config; `store_endpoints` empty: the in-memory store."""
    cfg: dict[str, Any] = {
        "server": _listen(),
        "status_http": _listen(),
        "coordinator_address": coordinator_address,
        "fault_tolerance_config": spec.fault_tolerance(),
        "heartbeat_interval_sec": spec.heartbeat_interval_sec,
    }
    for key in ("heartbeat_timeout_sec", "publish_interval_sec", "reconfiguration_timeout_sec"):
        value = getattr(spec, key)
        if value is not None:
            cfg[key] = value
    if store_endpoints:
        cfg["store"] = {"etcd_endpoints": list(store_endpoints), "key_prefix": store_key_prefix}
    if security is not None:
        cfg["security"] = security
    if spec.controller_replicas > 1 or spec.leader_lease_ttl_sec is not None:
        cfg["leader_election"] = {"replica_id": spec.replica_name(index)}
        if spec.leader_lease_ttl_sec is not None:
            cfg["leader_election"]["lease_ttl_sec"] = spec.leader_lease_ttl_sec
    return _override(cfg, spec.controller_overrides)


def ft_capability(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "engine_ft_enabled": True, "scale_down_supported": True, "external_lb": True, "auto_recovery": False,
        "enable_eplb": True, "num_redundant_experts": spec.num_redundant_experts, **spec.capability,
    }


def nodemanager_config(spec: ClusterSpec, pod: PodPlan, *, controller_addresses: list[str], ports: PortsPlan,
                       engine_keys: dict[str, Any], log_dir: str,
                       security: dict[str, Any] | None = None) -> dict[str, Any]:
    """One pod's NodeManager: listens on the pod's own address, knows every Controller replica (the
    first as `controller_address`), and runs what `engine_keys` (the engine backend's part) says."""
    iid = pod.instance_id
    ft = spec.fault_tolerance()
    if spec.engine_poll_interval_sec is not None:
        ft["engine_status_poll_interval_sec"] = spec.engine_poll_interval_sec
    cfg: dict[str, Any] = {
        "server": _listen(pod.ip),
        "metrics_http": _listen(pod.ip),
        "pod_ip": pod.ip,
        "node_name": f"node-{pod.ip}",
        "controller_address": controller_addresses[0],
        "controller_addresses": list(controller_addresses[1:]),
        "instance_id": iid,
        "model": spec.model,
        "dp_size": spec.dp_size,
        "dp_master_ip": spec.pod_ip(iid, 0),
        "dp_master_port": ports.dp_master_port[iid],
        "dp_store_port_base": ports.dp_store_port_base[iid],
        "ft_capability": ft_capability(spec),
        "fault_tolerance_config": ft,
        "heartbeat_interval_sec": spec.heartbeat_interval_sec,
        "log_dir": log_dir,
        **engine_keys,
    }
    if security is not None:
        cfg["security"] = security
    return _override(cfg, spec.nodemanager_overrides, spec.pod_overrides.get(pod.ip, {}))


def device_infos(spec: ClusterSpec, rank: int) -> list[dict[str, str]]:
    """One device per rank, numbered within its pod."""
    return [{"device_id": f"Ascend910-{rank % spec.ranks_per_pod}"}]
