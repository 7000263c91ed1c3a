"""The NetworkPolicy set of deploy/k8s (base/network-policy.yaml, in every overlay) read for its
intent: which pod may reach which port. A small evaluator of Kubernetes ingress semantics (a pod
selected by any Ingress policy is isolated; a connection is allowed when some rule of a policy
selecting the target admits its source and port) answers for the real pods and ports the base
configs use. Runs without cluster tools; test_manifests.py renders and validates the same objects."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import yaml

from .deploy_helpers import K8S

POLICIES = [d for d in yaml.safe_load_all((K8S / "base/network-policy.yaml").read_text()) if d]
CONFIG = {name: yaml.safe_load((K8S / f"base/config/{name}.yaml").read_text())
          for name in ("controller", "coordinator", "nodemanager")}
PRODUCTION_NM = yaml.safe_load((K8S / "overlays/production/config/nodemanager.yaml").read_text())


@dataclass(frozen=True)
class Pod:
    name: str  # app.kubernetes.io/name
    namespace: str = "motor"
    namespace_labels: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.name}


CONTROLLER, COORDINATOR, ENGINE, ETCD = Pod("motor-controller"), Pod("motor-coordinator"), Pod("motor-engine"), Pod("motor-etcd")
OPERATOR = Pod("motorctl", "ops", {"motor-access": "operator"})
PROMETHEUS = Pod("prometheus", "monitoring", {"motor-access": "monitoring"})
STRANGER = Pod("any-app", "motor")  # another workload in the namespace
USER = Pod("client", "apps")


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr  # the only operator the set uses
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _peer_admits(peer: dict, source: Pod, policy_namespace: str) -> bool:
    assert "ipBlock" not in peer
    pods = peer.get("podSelector")
    namespaces = peer.get("namespaceSelector")
    if namespaces is None:  # a podSelector alone: pods of the policy's namespace
        return source.namespace == policy_namespace and _selects(pods, source.labels)
    return _selects(namespaces, source.namespace_labels) and (pods is None or _selects(pods, source.labels))


def _port_admits(port: dict, number: int) -> bool:
    assert port.get("protocol", "TCP") == "TCP" and isinstance(port["port"], int)
    return port["port"] <= number <= port.get("endPort", port["port"])


def allowed(source: Pod, target: Pod, port: int) -> bool:
    selecting = [p for p in POLICIES if p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            peers, ports = rule.get("from"), rule.get("ports")
            if (peers is None or any(_peer_admits(p, source, policy["metadata"]["namespace"]) for p in peers)) and (
                    ports is None or any(_port_admits(p, port) for p in ports)):
                return True
    return False


def who_reaches(target: Pod, port: int) -> set[str]:
    everyone = (CONTROLLER, COORDINATOR, ENGINE, ETCD, OPERATOR, PROMETHEUS, STRANGER, USER)
    return {p.name for p in everyone if allowed(p, target, port)}


NM, CTL, CO = CONFIG["nodemanager"], CONFIG["controller"], CONFIG["coordinator"]


def test_every_pod_of_the_namespace_is_isolated() -> None:
    deny = next(p for p in POLICIES if p["metadata"]["name"] == "motor-default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert who_reaches(Pod("any-new-pod"), 80) == set()


@pytest.mark.parametrize("ranks_per_pod", [2, 8])
def test_engine_http_only_from_the_coordinator(ranks_per_pod: int) -> None:
    # Inference and the FT API (`{prefix}/apply`) share each rank's port; the NodeManager reaches
    # them inside the pod, where no policy applies.
    for port in range(8100, 8100 + ranks_per_pod):
        assert who_reaches(ENGINE, port) == {"motor-coordinator"}, port
    assert who_reaches(ENGINE, 8100 + 8) == set()


@pytest.mark.parametrize("config", [NM, PRODUCTION_NM], ids=["base", "production"])
def test_dp_rendezvous_only_between_engine_pods(config: dict) -> None:
    ports = [config["dp_master_port"], *range(config["dp_store_port_base"], config["dp_store_port_base"] + config["dp_size"])]
    for port in ports:
        assert who_reaches(ENGINE, port) == {"motor-engine"}, port
    assert who_reaches(ENGINE, config["dp_store_port_base"] + 32) == set()


def test_nodemanager_grpc_only_from_the_controller_and_metrics_from_prometheus() -> None:
    assert who_reaches(ENGINE, NM["server"]["port"]) == {"motor-controller"}
    assert who_reaches(ENGINE, NM["metrics_http"]["port"]) == {"prometheus"}
    assert who_reaches(ENGINE, NM["server"]["health_port"]) == set()  # the kubelet probes from the node


def test_controller_grpc_from_motor_pods_and_operators_only() -> None:
    assert who_reaches(CONTROLLER, CTL["server"]["port"]) == {"motor-controller", "motor-coordinator", "motor-engine",
                                                               "motorctl"}
    assert who_reaches(CONTROLLER, CTL["status_http"]["port"]) == {"motorctl", "prometheus"}


def test_coordinator_inference_from_users_and_grpc_from_the_controller_and_operators() -> None:
    assert who_reaches(COORDINATOR, CO["http"]["port"]) == {"motor-controller", "motor-coordinator", "motor-engine",
                                                            "motor-etcd", "motorctl", "prometheus", "any-app", "client"}
    assert who_reaches(COORDINATOR, CO["server"]["port"]) == {"motor-controller", "motorctl"}


def test_etcd_clients_only_the_controller() -> None:
    endpoint_port = int(CTL["store"]["etcd_endpoints"][0].rsplit(":", 1)[1])
    assert who_reaches(ETCD, endpoint_port) == {"motor-controller"}
    assert who_reaches(ETCD, 2380) == {"motor-etcd"}
    assert who_reaches(ETCD, 2381) == {"prometheus"}


def test_the_policies_name_the_ports_the_manifests_open() -> None:
    """Every containerPort of a Motor workload is either allowed to someone or only the kubelet's."""
    for name in ("controller", "coordinator", "engine", "etcd"):
        docs = [d for d in yaml.safe_load_all((K8S / f"base/{name}.yaml").read_text()) if d]
        workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
        target = Pod(workload["metadata"]["name"])
        for port in workload["spec"]["template"]["spec"]["containers"][0]["ports"]:
            reached = who_reaches(target, port["containerPort"])
            assert reached or port["name"] == "health", (name, port)
            assert "any-app" not in reached or target == COORDINATOR, (name, port)
