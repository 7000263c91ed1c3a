"""The NetworkPolicy set of deploy/k8s (base/network-policy.yaml, in every overlay) read for its
intent: which pod may reach which port. A small evaluator of Kubernetes semantics (a pod selected by
any Ingress policy is isolated for ingress, by any Egress policy for egress; a direction is allowed
when some rule of a policy selecting the pod admits the peer and port; a connection needs the
source's egress and the target's ingress) answers for the real pods and ports the base configs use.
Runs without cluster tools; test_manifests.py renders and validates the same objects."""

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
    extra_labels: dict[str, str] = field(default_factory=dict, hash=False)
    # Outside the cluster's pods (the API server's address, the internet): no selector admits it.
    external: bool = False

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.name, **self.extra_labels}


CONTROLLER, COORDINATOR, ENGINE, ETCD = Pod("motor-controller"), Pod("motor-coordinator"), Pod("motor-engine"), Pod("motor-etcd")
OPERATOR = Pod("motorctl", "ops", {"motor-access": "operator"})
PROMETHEUS = Pod("prometheus", "monitoring", {"motor-access": "monitoring"})
STRANGER = Pod("any-app", "motor")  # another workload in the namespace
USER = Pod("client", "apps")
ETCD_RBAC = Pod("motor-etcd-rbac")  # the production overlay's bootstrap Job
DNS = Pod("coredns", "kube-system", {"kubernetes.io/metadata.name": "kube-system"}, {"k8s-app": "kube-dns"})
API_SERVER = Pod("kube-apiserver", "", external=True)
INTERNET = Pod("example.com", "", external=True)
MOTOR_PODS = (CONTROLLER, COORDINATOR, ENGINE, ETCD, ETCD_RBAC)


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
    if source.external:
        return False
    pods = peer.get("podSelector")
    namespaces = peer.get("namespaceSelector")
    if namespaces is None:  # a podSelector alone: pods of the policy's namespace
        return source.namespace == policy_namespace and _selects(pods, source.labels)
    return _selects(namespaces, source.namespace_labels) and (pods is None or _selects(pods, source.labels))


def _port_admits(port: dict, number: int, protocol: str) -> bool:
    assert port.get("protocol", "TCP") in ("TCP", "UDP") and isinstance(port["port"], int)
    return port.get("protocol", "TCP") == protocol and port["port"] <= number <= port.get("endPort", port["port"])


def _direction(pod: Pod, peer: Pod, port: int, protocol: str, kind: str) -> bool:
    """Whether `pod`'s policies of `kind` (Ingress: peer is the source; Egress: the destination) admit it."""
    if pod.external:  # not a pod of a namespace with policies
        return True
    key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    selecting = [p for p in POLICIES if p["metadata"]["namespace"] == pod.namespace
                 and kind in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(key, []):
            peers, ports = rule.get(peers_key), rule.get("ports")
            if (peers is None or any(_peer_admits(p, peer, policy["metadata"]["namespace"]) for p in peers)) and (
                    ports is None or any(_port_admits(p, port, protocol) for p in ports)):
                return True
    return False


def allowed(source: Pod, target: Pod, port: int) -> bool:
    """The target's ingress policies admit the source (its egress aside)."""
    return _direction(target, source, port, "TCP", "Ingress")


def sends(source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    """The source's egress policies admit the destination (its ingress aside)."""
    return _direction(source, target, port, protocol, "Egress")


def connects(source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    return sends(source, target, port, protocol) and _direction(target, source, port, protocol, "Ingress")


def who_reaches(target: Pod, port: int) -> set[str]:
    everyone = (CONTROLLER, COORDINATOR, ENGINE, ETCD, ETCD_RBAC, OPERATOR, PROMETHEUS, STRANGER, USER)
    return {p.name for p in everyone if allowed(p, target, port)}


def what_it_reaches(source: Pod) -> set[tuple[str, int]]:
    """Every (destination, port) of the Motor deployment's listeners `source` can connect to."""
    listeners = {CONTROLLER: (50051, 8081, 50060), COORDINATOR: (8000, 50052, 50060),
                 ENGINE: (50053, 9102, 50060, *range(8100, 8109), 29500, *range(29600, 29633)),
                 ETCD: (2379, 2380, 2381), API_SERVER: (443, 6443), INTERNET: (80, 443), OPERATOR: (50051,),
                 PROMETHEUS: (9090,), STRANGER: (80, 443)}
    return {(target.name, port) for target, ports in listeners.items() for port in ports
            if connects(source, target, port)}


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
                                                            "motor-etcd", "motor-etcd-rbac", "motorctl", "prometheus",
                                                            "any-app", "client"}
    assert who_reaches(COORDINATOR, CO["server"]["port"]) == {"motor-controller", "motorctl"}


def test_etcd_clients_only_the_controller() -> None:
    endpoint_port = int(CTL["store"]["etcd_endpoints"][0].rsplit(":", 1)[1])
    assert who_reaches(ETCD, endpoint_port) == {"motor-controller", "motor-etcd-rbac"}
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


# -- egress -------------------------------------------------------------------------------------

def test_every_pod_of_the_namespace_sends_only_dns_by_default() -> None:
    deny = next(p for p in POLICIES if p["metadata"]["name"] == "motor-default-deny-egress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    newcomer = Pod("any-new-pod")
    assert what_it_reaches(newcomer) == set()
    assert sends(newcomer, DNS, 53, "UDP") and sends(newcomer, DNS, 53, "TCP")
    assert not sends(newcomer, DNS, 80) and not sends(newcomer, Pod("other", "kube-system", DNS.namespace_labels), 53, "UDP")


@pytest.mark.parametrize("pod", MOTOR_PODS, ids=lambda p: p.name)
def test_every_motor_pod_resolves_names(pod: Pod) -> None:
    assert connects(pod, DNS, 53, "UDP") and connects(pod, DNS, 53, "TCP")


def test_the_controller_reaches_etcd_its_peers_and_the_kubernetes_api() -> None:
    etcd_port = int(CTL["store"]["etcd_endpoints"][0].rsplit(":", 1)[1])
    coordinator_port = int(CTL["coordinator_address"].rsplit(":", 1)[1])
    assert what_it_reaches(CONTROLLER) == {
        ("motor-etcd", etcd_port), ("motor-engine", NM["server"]["port"]), ("motor-coordinator", coordinator_port),
        ("motor-controller", CTL["server"]["port"]), ("kube-apiserver", 443), ("kube-apiserver", 6443),
        # The API server's rule names ports only: any address on 443 (narrow it with an ipBlock).
        ("example.com", 443)}
    assert not sends(CONTROLLER, ENGINE, 8100) and not sends(CONTROLLER, INTERNET, 80)


def test_the_coordinator_reaches_the_engines_inference_and_the_controller() -> None:
    assert what_it_reaches(COORDINATOR) == {("motor-engine", p) for p in range(8100, 8108)} | {
        ("motor-controller", CTL["server"]["port"])}


def test_engine_pods_reach_the_controller_their_engines_and_each_others_rendezvous_ports() -> None:
    dp = {NM["dp_master_port"], *range(NM["dp_store_port_base"], NM["dp_store_port_base"] + NM["dp_size"])}
    reached = what_it_reaches(ENGINE)
    assert ("motor-controller", CTL["server"]["port"]) in reached
    assert {("motor-engine", p) for p in dp} <= reached
    # The engine ports are allowed out (the pod's own engines) but no other pod's ingress takes them.
    assert sends(ENGINE, ENGINE, 8100) and not connects(ENGINE, ENGINE, 8100)
    assert reached == {("motor-controller", CTL["server"]["port"]), ("motor-engine", 29500),
                       *(("motor-engine", p) for p in range(29600, 29632))}
    assert not sends(ENGINE, ETCD, 2379) and not sends(ENGINE, COORDINATOR, 50052) and not sends(ENGINE, INTERNET, 443)


def test_etcd_members_reach_their_peers_and_the_bootstrap_job_only_etcd() -> None:
    assert what_it_reaches(ETCD) == {("motor-etcd", 2380)}
    assert what_it_reaches(ETCD_RBAC) == {("motor-etcd", 2379)}


def test_every_flow_motor_needs_is_open_both_ways() -> None:
    """Each call of the deployment, as the configs name it: the source may send and the target take."""
    flows = [
        (CONTROLLER, ETCD, 2379), (CONTROLLER, ENGINE, NM["server"]["port"]), (CONTROLLER, COORDINATOR, 50052),
        (CONTROLLER, CONTROLLER, 50051), (COORDINATOR, CONTROLLER, 50051), (ENGINE, CONTROLLER, 50051),
        *((COORDINATOR, ENGINE, p) for p in range(8100, 8108)), (ENGINE, ENGINE, NM["dp_master_port"]),
        *((ENGINE, ENGINE, p) for p in range(NM["dp_store_port_base"], NM["dp_store_port_base"] + NM["dp_size"])),
        (ETCD, ETCD, 2380), (ETCD_RBAC, ETCD, 2379), (CONTROLLER, API_SERVER, 443),
    ]
    assert [f for f in flows if not connects(*f)] == []
