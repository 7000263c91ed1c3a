"""deploy/k8s: every kustomization renders (kubectl's kustomize) and every object passes
`kubernetes-validate --strict` for two Kubernetes versions; then what Motor needs of the objects:
RBAC limited to what the hardware monitor reads, etcd members per overlay, one Controller, gRPC probes
on each service's health port, requests, scrape annotations, Secrets referenced and never committed,
service configs the config models accept, the engine pod's NPUs from the downward API and vLLM's FT
flags matching the capability the gate reads."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from motor.common.config.loader import build_config
from motor.common.pki import create_dev_pki
from motor.common.security import Role
from motor.controller.fault_tolerance.gate import evaluate_gate
from motor.controller.hardware.formats.names import CONFIGMAP_NAMESPACE
from motor.controller.config import ControllerConfig
from motor.controller.model.capability import Capability
from motor.coordinator.config import CoordinatorConfig
from nodemanager.config import NodeManagerConfig
from nodemanager.device_ids import check_device_ids

from .deploy_helpers import DEPLOY, K8S, K8S_VERSIONS, KUSTOMIZATIONS, REPO, find, render, render_text, run, tool

pytestmark = pytest.mark.timeout(300)

MOTOR_IMAGES = ("motor", "motor-demo")
SERVICES = {  # workload → (kind, ConfigMap, config file, model)
    "motor-controller": ("Deployment", "motor-controller-config", "controller.yaml", ControllerConfig),
    "motor-coordinator": ("Deployment", "motor-coordinator-config", "coordinator.yaml", CoordinatorConfig),
    "motor-engine": ("StatefulSet", "motor-nodemanager-config", "nodemanager.yaml", NodeManagerConfig),
}


def _load_renderer():
    spec = importlib.util.spec_from_file_location("render_nodemanager", K8S / "base/config/render_nodemanager.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


renderer = _load_renderer()


def _pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def _motor_image(image: str) -> bool:
    name = image.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return name in MOTOR_IMAGES or name == "motor-vllm-ascend"


def _config(docs: list[dict], configmap: str, key: str) -> dict:
    return yaml.safe_load(find(docs, "ConfigMap", configmap)["data"][key])


# -- render and validate ------------------------------------------------------------------------

@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders_and_validates_strictly(kustomization: str, tmp_path: Path) -> None:
    docs = render(kustomization)
    kinds = sorted({d["kind"] for d in docs})
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
            "Service", "Deployment", "StatefulSet", "NetworkPolicy"} <= set(kinds), kinds
    assert "Secret" not in kinds  # certificates are referenced, never shipped
    rendered = tmp_path / f"{kustomization.replace('/', '-')}.yaml"
    rendered.write_text(render_text(kustomization))
    for version in K8S_VERSIONS:
        proc = run([tool("kubernetes-validate"), "--strict", "--quiet", "-k", version, str(rendered)])
        assert proc.returncode == 0, f"{kustomization} against {version}:\n{proc.stdout}{proc.stderr}"
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), names


def test_every_complete_manifest_file_validates_on_its_own(tmp_path: Path) -> None:
    """The base's resource files are whole objects (the overlays' files are patches)."""
    files = sorted((K8S / "base").glob("*.yaml"))
    files = [f for f in files if f.name != "kustomization.yaml"]
    assert len(files) >= 6
    for version in K8S_VERSIONS:
        proc = run([tool("kubernetes-validate"), "--strict", "--quiet", "-k", version, *map(str, files)])
        assert proc.returncode == 0, f"{version}:\n{proc.stdout}{proc.stderr}"


def test_external_etcd_component_replaces_the_statefulset(tmp_path: Path) -> None:
    overlay = tmp_path / "external"
    overlay.mkdir()
    rel = os.path.relpath(K8S, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/overlays/dev"], "components": [f"{rel}/components/external-etcd"]}))
    proc = run([tool("kubectl"), "kustomize", str(overlay)])
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert not [d for d in docs if d["metadata"]["name"].startswith("motor-etcd")]
    args = find(docs, "Deployment", "motor-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    etcd = [a.removeprefix("--etcd=") for a in args if a.startswith("--etcd=")]
    assert len(etcd) == 3
    cfg = build_config(ControllerConfig, {"store": {"etcd_endpoints": etcd}})
    assert cfg.store.etcd_endpoints == etcd
    # Default-deny egress stays; the Controller may reach the external members' client port.
    egress = find(docs, "NetworkPolicy", "motor-controller-egress")["spec"]["egress"]
    assert {"ports": [{"port": 2379, "protocol": "TCP"}]} in egress
    assert find(docs, "NetworkPolicy", "motor-default-deny-egress")


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_overlay_keeps_the_network_policies_of_the_base(kustomization: str) -> None:
    """test_network_policy.py reads the base file for its intent; every overlay renders the same set."""
    base = [d for d in yaml.safe_load_all((K8S / "base/network-policy.yaml").read_text()) if d]
    rendered = {d["metadata"]["name"]: d for d in render(kustomization) if d["kind"] == "NetworkPolicy"}
    assert set(rendered) == {d["metadata"]["name"] for d in base}
    for doc in base:
        assert rendered[doc["metadata"]["name"]]["spec"] == doc["spec"]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_plaintext_is_explicit_and_production_is_production(kustomization: str) -> None:
    docs = render(kustomization)
    for _, configmap, key, _ in SERVICES.values():
        config = _config(docs, configmap, key)
        if kustomization == "overlays/production":
            assert config["mode"] == "production" and "security" in config and "insecure_plaintext" not in config
            if configmap == "motor-controller-config":  # no NodeManager certificate without its pod's URI
                assert config["security"]["require_pod_identity"] is True
        else:
            assert config["insecure_plaintext"] is True and "security" not in config and "mode" not in config


# -- RBAC ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_controller_rbac_reads_only_device_info_configmaps_and_nodes(kustomization: str) -> None:
    docs = render(kustomization)
    rbac = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert len(rbac) == 2, [d["metadata"]["name"] for d in rbac]
    role = find(docs, "Role", "motor-controller-deviceinfo-reader")
    assert role["metadata"]["namespace"] == CONFIGMAP_NAMESPACE == "kube-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    cluster_role = find(docs, "ClusterRole", "motor-controller-node-reader")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    sa = find(docs, "ServiceAccount", "motor-controller")
    for kind, name in (("RoleBinding", "motor-controller-deviceinfo-reader"),
                       ("ClusterRoleBinding", "motor-controller-node-reader")):
        binding = find(docs, kind, name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "motor-controller",
                                        "namespace": sa["metadata"]["namespace"]}]
    assert find(docs, "RoleBinding", "motor-controller-deviceinfo-reader")["metadata"]["namespace"] == "kube-system"
    controller = find(docs, "Deployment", "motor-controller")
    assert _pod_spec(controller)["serviceAccountName"] == "motor-controller"
    # Nothing else runs with a token it does not need.
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet") and doc["metadata"]["name"] != "motor-controller":
            assert _pod_spec(doc).get("serviceAccountName") in (None, "default")
    assert _config(docs, "motor-controller-config", "controller.yaml")["hardware_monitor"]["kubernetes"] == "on"


# -- replicas -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("kustomization", "members"), [("base", 1), ("overlays/dev", 1), ("overlays/production", 3)])
def test_etcd_members(kustomization: str, members: int) -> None:
    docs = render(kustomization)
    etcd = find(docs, "StatefulSet", "motor-etcd")
    assert etcd["spec"]["replicas"] == members
    env = {e["name"]: e.get("value") for e in _pod_spec(etcd)["containers"][0]["env"]}
    initial = env["ETCD_INITIAL_CLUSTER"].split(",")
    assert [m.split("=")[0] for m in initial] == [f"motor-etcd-{i}" for i in range(members)]
    scheme = "https" if members == 3 else "http"
    assert all(m.split("=")[1].startswith(f"{scheme}://motor-etcd-") for m in initial)
    endpoints = _config(docs, "motor-controller-config", "controller.yaml")["store"]["etcd_endpoints"]
    assert endpoints and all(e.endswith(":2379") and "motor-etcd" in e for e in endpoints)
    if members == 3:
        assert env["ETCD_CLIENT_CERT_AUTH"] == "true" and env["ETCD_PEER_CLIENT_CERT_AUTH"] == "true"
        assert find(docs, "PodDisruptionBudget", "motor-etcd")["spec"]["minAvailable"] == 2


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_two_controllers_elect_a_leader_and_advertise_their_pod_ip(kustomization: str) -> None:
    controller = find(render(kustomization), "Deployment", "motor-controller")
    assert controller["spec"]["replicas"] == 2
    container = controller["spec"]["template"]["spec"]["containers"][0]
    assert "leader_election.advertise_address=$(POD_IP):50051" in container["args"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert env["POD_IP"] == "status.podIP" and env["POD_NAME"] == "metadata.name"


# -- containers: probes, requests, security, scraping -------------------------------------------

@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_grpc_probes_on_the_health_port_and_requests(kustomization: str) -> None:
    docs = render(kustomization)
    for workload, (kind, configmap, key, _) in SERVICES.items():
        doc = find(docs, kind, workload)
        spec = _pod_spec(doc)
        config = _config(docs, configmap, key)
        health_port = config["server"]["health_port"]
        container = spec["containers"][0]
        assert _motor_image(container["image"]), container["image"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": health_port}, (workload, probe)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["health"] == health_port and ports["grpc"] == config["server"]["port"]
        # The tini entrypoint stays: args only, never command.
        assert "command" not in container and container["args"][0] == {
            "motor-controller": "motor-controller", "motor-coordinator": "motor-coordinator",
            "motor-engine": "motor-nodemanager"}[workload]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        spec = _pod_spec(doc)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            requests = container["resources"]["requests"]
            assert requests.get("cpu") and requests.get("memory"), (doc["metadata"]["name"], container["name"])
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_prometheus_scrapes_each_service_where_it_serves_metrics(kustomization: str) -> None:
    docs = render(kustomization)
    metrics_ports = {
        "motor-controller": _config(docs, "motor-controller-config", "controller.yaml")["status_http"]["port"],
        "motor-coordinator": _config(docs, "motor-coordinator-config", "coordinator.yaml")["http"]["port"],
        "motor-engine": _config(docs, "motor-nodemanager-config", "nodemanager.yaml")["metrics_http"]["port"],
    }
    for workload, port in metrics_ports.items():
        kind = SERVICES[workload][0]
        annotations = find(docs, kind, workload)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/path"] == "/metrics"
        secure = "security" in _config(docs, *SERVICES[workload][1:3])
        assert annotations.get("prometheus.io/scheme", "http") == ("https" if secure else "http")


# -- secrets ------------------------------------------------------------------------------------

def test_production_references_certificate_secrets_and_dev_needs_none() -> None:
    prod = render("overlays/production")
    wanted = {"motor-controller-tls", "motor-coordinator-tls", "motor-etcd-tls"}
    referenced = {v["secret"]["secretName"] for d in prod if d["kind"] in ("Deployment", "StatefulSet")
                  for v in _pod_spec(d).get("volumes", []) if "secret" in v}
    assert referenced == wanted
    # No Secret shared by every NodeManager: each pod its own certificate (cert-manager's csi-driver),
    # naming the pod (a pod URI, the pod's DNS name that it advertises to the Controller).
    engine = _pod_spec(find(prod, "StatefulSet", "motor-engine"))
    tls = next(v for v in engine["volumes"] if v["name"] == "tls")
    attributes = tls["csi"]["volumeAttributes"]
    assert tls["csi"]["driver"] == "csi.cert-manager.io" and "secret" not in tls
    assert attributes["csi.cert-manager.io/uri-sans"].split(",") == [
        "spiffe://motor/nodemanager", "spiffe://motor/ns/${POD_NAMESPACE}/pod/${POD_NAME}"]
    assert attributes["csi.cert-manager.io/dns-names"].startswith("${POD_NAME}.motor-engine.")
    render_env = {e["name"]: e for e in engine["initContainers"][0]["env"]}
    assert render_env["MOTOR_ADVERTISE_HOST"]["value"].startswith("$(MOTOR_POD_NAME).motor-engine.")
    for workload, (kind, configmap, key, _) in SERVICES.items():
        security = _config(prod, configmap, key)["security"]
        mounts = {m["mountPath"]: m["name"] for m in _pod_spec(find(prod, kind, workload))["containers"][0]["volumeMounts"]}
        for path in security.values():
            if isinstance(path, str):
                assert str(Path(path).parent) in mounts, (workload, path)
    dev = render("overlays/dev")
    assert not [v for d in dev if d["kind"] in ("Deployment", "StatefulSet") for v in _pod_spec(d).get("volumes", [])
                if "secret" in v]


# cert-manager's CA issuer (cert-manager.io/v1 ClusterIssuer, spec.ca): kubernetes-validate has no
# schema for the CRD, so its fields are checked here against the CRD's.
_CA_ISSUER_FIELDS = {"secretName", "crlDistributionPoints", "ocspServers", "issuingCertificateURLs"}


def test_production_ships_the_motor_ca_cluster_issuer_the_engine_certificates_name() -> None:
    prod = render("overlays/production")
    issuer = find(prod, "ClusterIssuer", "motor-ca")
    assert issuer["apiVersion"] == "cert-manager.io/v1" and "namespace" not in issuer["metadata"]
    assert set(issuer["spec"]) == {"ca"} and set(issuer["spec"]["ca"]) <= _CA_ISSUER_FIELDS
    secret = issuer["spec"]["ca"]["secretName"]
    assert secret == "motor-ca-key-pair"
    attributes = next(v for v in _pod_spec(find(prod, "StatefulSet", "motor-engine"))["volumes"]
                      if v["name"] == "tls")["csi"]["volumeAttributes"]
    assert (attributes["csi.cert-manager.io/issuer-name"], attributes["csi.cert-manager.io/issuer-kind"]) == (
        "motor-ca", "ClusterIssuer")
    # The CA key stays with cert-manager: no Motor pod mounts it.
    mounted = {v["secret"]["secretName"] for d in prod if d["kind"] in ("Deployment", "StatefulSet", "Job")
               for v in _pod_spec(d).get("volumes", []) if "secret" in v}
    assert secret not in mounted
    for kustomization in ("base", "overlays/dev"):
        assert not [d for d in render(kustomization) if d["kind"] == "ClusterIssuer"]


def test_production_bootstraps_etcd_rbac_with_an_idempotent_job() -> None:
    from motor.launch.etcd_rbac import parser

    prod = render("overlays/production")
    job = find(prod, "Job", "motor-etcd-rbac")
    spec = _pod_spec(job)
    assert spec["restartPolicy"] == "OnFailure" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert _motor_image(container["image"]) and "command" not in container  # the tini entrypoint stays
    assert container["args"][:4] == ["python", "-m", "motor.launch.etcd_rbac", "bootstrap"]
    args = parser().parse_args(container["args"][3:])
    # The members the Controller uses, the files the Job mounts.
    assert args.endpoint == _config(prod, "motor-controller-config", "controller.yaml")["store"]["etcd_endpoints"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["secret"] for v in spec["volumes"]}
    for path in (args.cacert, args.cert, args.key, args.controller_cert):
        assert str(path.parent) in mounts, path
    assert volumes[mounts[str(args.cert.parent)]]["secretName"] == "motor-etcd-admin-tls"
    # Only the Controller certificate's CN is read: its key is not mounted.
    controller = volumes[mounts[str(args.controller_cert.parent)]]
    assert controller["secretName"] == "motor-controller-tls"
    assert controller["items"] == [{"key": "tls.crt", "path": "tls.crt"}]
    for kustomization in ("base", "overlays/dev"):  # plaintext etcd there: RBAC by certificate needs TLS
        assert not [d for d in render(kustomization) if d["kind"] == "Job"]


def test_no_key_or_certificate_is_committed_under_deploy() -> None:
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "PRIVATE KEY-----" not in text and "BEGIN CERTIFICATE" not in text, path


# -- service configs ----------------------------------------------------------------------------

def _with_dev_files(config: dict, role: Role, pki) -> dict:
    """The config with its certificate paths pointed at real files (the Secret mounts of a pod)."""
    config = copy.deepcopy(config)
    if "security" in config:
        config["security"] = {**config["security"], **pki.security(role)}
    return config


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_service_configs_are_accepted_by_the_config_models(kustomization: str, tmp_path: Path) -> None:
    docs = render(kustomization)
    pki = create_dev_pki(tmp_path / "pki", ["localhost"])
    controller = build_config(ControllerConfig, _with_dev_files(
        _config(docs, "motor-controller-config", "controller.yaml"), Role.CONTROLLER, pki))
    coordinator = build_config(CoordinatorConfig, _with_dev_files(
        _config(docs, "motor-coordinator-config", "coordinator.yaml"), Role.COORDINATOR, pki))
    assert controller.fault_tolerance_config.enable_dp_scale_down_proxy
    assert controller.coordinator_address == f"motor-coordinator.motor.svc:{coordinator.server.port}"
    assert controller.server.health_port == coordinator.server.health_port == 50060
    template = _config(docs, "motor-nodemanager-config", "nodemanager.yaml")
    assert template["controller_address"] == f"motor-controller.motor.svc:{controller.server.port}"
    engine = find(docs, "StatefulSet", "motor-engine")
    env = {e["name"]: e.get("value") for e in _pod_spec(engine)["initContainers"][0]["env"]}
    per_pod = int(env["MOTOR_RANKS_PER_POD"])
    assert engine["spec"]["replicas"] * per_pod == template["dp_size"]
    script = find(docs, "ConfigMap", "motor-nodemanager-config")["data"]["render_nodemanager.py"]
    assert script == (K8S / "base/config/render_nodemanager.py").read_text()
    devices = [f"Ascend910-{i}" for i in range(per_pod)]
    for index in range(engine["spec"]["replicas"]):
        pod_env = {**{k: v for k, v in env.items() if v is not None}, "MOTOR_POD_INDEX": str(index),
                   "MOTOR_POD_IP": f"10.0.0.{index + 10}", "MOTOR_NODE_NAME": f"node-{index}"}
        rendered = renderer.render(template, pod_env, devices, resolve_host=lambda host, _t: "10.0.0.10")
        nm = build_config(NodeManagerConfig, _with_dev_files(rendered, Role.NODEMANAGER, pki))
        assert [e.dp_rank for e in nm.engines] == list(range(index * per_pod, (index + 1) * per_pod))
        assert nm.dp_master_ip == "10.0.0.10" and nm.pod_ip == f"10.0.0.{index + 10}"
        assert [d.device_id for e in nm.engines for d in e.device_infos] == devices
        if nm.pod_annotations_file is not None:
            # What the render step wrote passes the NodeManager's own registration check.
            annotations = tmp_path / f"annotations-{index}"
            annotations.write_text(_downward({"huawei.com/AscendReal": ",".join(devices),
                                              "huawei.com/Ascend910": ",".join(devices)}))
            assert "are cards of this pod" in check_device_ids(
                str(annotations), [d.device_id for e in nm.engines for d in e.device_infos])
        cap = nm.ft_capability
        gate = evaluate_gate(enable_fault_tolerance=controller.fault_tolerance_config.enable_fault_tolerance,
                             enable_dp_scale_down=controller.fault_tolerance_config.enable_dp_scale_down,
                             capability=Capability(cap.engine_ft_enabled, cap.scale_down_supported, cap.external_lb,
                                                   cap.auto_recovery, cap.enable_eplb, cap.num_redundant_experts))
        assert gate.allowed, gate.reason_codes


# -- the engine pod -----------------------------------------------------------------------------

@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_engine_pod_reads_its_npus_from_its_annotations(kustomization: str) -> None:
    docs = render(kustomization)
    engine = find(docs, "StatefulSet", "motor-engine")
    spec = _pod_spec(engine)
    podinfo = next(v for v in spec["volumes"] if v["name"] == "podinfo")["downwardAPI"]["items"]
    item = next(i for i in podinfo if i["fieldRef"]["fieldPath"] == "metadata.annotations")
    init = spec["initContainers"][0]
    mount = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "podinfo")
    env = {e["name"]: e for e in init["env"]}
    annotations_file = f"{mount}/{item['path']}"
    assert env["MOTOR_POD_ANNOTATIONS_FILE"]["value"] == annotations_file
    assert env["MOTOR_POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["MOTOR_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["MOTOR_DP_MASTER_HOST"]["value"] == f"motor-engine-0.{engine['spec']['serviceName']}.motor.svc"
    # The NodeManager reads the config the init container wrote, and sees the same annotations.
    main = spec["containers"][0]
    out = init["args"][init["args"].index("--out") + 1]
    assert main["args"][:3] == ["motor-nodemanager", "--config", out]
    assert next(m["mountPath"] for m in main["volumeMounts"] if m["name"] == "podinfo") == mount
    template = _config(docs, "motor-nodemanager-config", "nodemanager.yaml")
    npus = main["resources"].get("requests", {}).get("huawei.com/Ascend910")
    if npus is None:  # the reference engine: no device plugin, nothing to check
        assert "pod_annotations_file" not in template and "MOTOR_DEVICES_PER_POD" not in env
    else:
        assert template["pod_annotations_file"] == annotations_file
        assert env["MOTOR_DEVICES_PER_POD"]["value"] == npus
    headless = find(docs, "Service", engine["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True


def test_production_engine_is_vllm_with_the_ft_flags_the_gate_needs() -> None:
    docs = render("overlays/production")
    nm = _config(docs, "motor-nodemanager-config", "nodemanager.yaml")
    argv = nm["engine_command"]
    assert argv[:2] == ["vllm", "serve"]
    for flag in ("--enable-fault-tolerance", "--data-parallel-external-lb", "--enable-expert-parallel", "--enable-eplb",
                 "--eplb-config", "--data-parallel-rank", "--data-parallel-size", "--data-parallel-address"):
        assert flag in argv, flag
    filled = [item.format(dp_rank=3, dp_size=32, host="10.0.0.1", port=8100, dp_master_ip="10.0.0.2",
                          dp_master_port=29500, ft_api_prefix="/fault_tolerance", model="m",
                          num_redundant_experts=nm["ft_capability"]["num_redundant_experts"]) for item in argv]
    eplb = yaml.safe_load(filled[filled.index("--eplb-config") + 1])
    assert eplb == {"num_redundant_experts": nm["ft_capability"]["num_redundant_experts"]} and eplb["num_redundant_experts"] > 0
    assert nm["ft_capability"] == {"engine_ft_enabled": True, "scale_down_supported": True, "external_lb": True,
                                   "auto_recovery": False, "enable_eplb": True,
                                   "num_redundant_experts": eplb["num_redundant_experts"]}
    assert nm["engine_ft_api_prefix"] == "/fault_tolerance"
    container = _pod_spec(find(docs, "StatefulSet", "motor-engine"))["containers"][0]
    assert container["resources"]["requests"]["huawei.com/Ascend910"] == container["resources"]["limits"]["huawei.com/Ascend910"]


def test_vllm_knows_every_flag_of_the_production_engine_command() -> None:
    """Against the vLLM release the test peer pins (.venv-vllm), when it is installed: each flag is
    declared by name or is a field of EngineArgs / FrontendArgs (vLLM derives --x-y from field x_y).
    (Building vLLM's real parser needs a device platform, which this machine has not.)"""
    package = next((REPO / ".venv-vllm/lib").glob("python3*/site-packages/vllm"), None)
    if package is None:
        pytest.skip("vLLM is not installed in .venv-vllm (`make deps` installs it)")
    source = "\n".join((package / f).read_text() for f in ("engine/arg_utils.py", "entrypoints/common/cli_args.py"))
    argv = _config(render("overlays/production"), "motor-nodemanager-config", "nodemanager.yaml")["engine_command"]
    for flag in (a for a in argv if a.startswith("--")):
        field = flag[2:].replace("-", "_")
        assert re.search(rf'"{re.escape(flag)}"', source) or re.search(rf"^    {field}: ", source, re.M), flag


# -- the render step ----------------------------------------------------------------------------

BASE_ENV = {"MOTOR_POD_INDEX": "1", "MOTOR_RANKS_PER_POD": "2", "MOTOR_POD_IP": "10.1.0.7", "MOTOR_NODE_NAME": "n7",
            "MOTOR_DP_MASTER_HOST": "motor-engine-0.motor-engine.motor.svc", "MOTOR_ENGINE_BASE_PORT": "8100"}


def test_render_ranks_ports_devices_and_master() -> None:
    seen = []
    out = renderer.render({"dp_size": 4, "model": "m"}, BASE_ENV, ["Ascend910-2", "Ascend910-3", "Ascend910-4", "Ascend910-5"],
                          resolve_host=lambda host, timeout: seen.append((host, timeout)) or "10.1.0.5")
    assert out["engines"] == [
        {"dp_rank": 2, "port": 8100, "device_infos": [{"device_id": "Ascend910-2"}, {"device_id": "Ascend910-3"}]},
        {"dp_rank": 3, "port": 8101, "device_infos": [{"device_id": "Ascend910-4"}, {"device_id": "Ascend910-5"}]},
    ]
    assert out["pod_ip"] == "10.1.0.7" and out["node_name"] == "n7" and out["dp_master_ip"] == "10.1.0.5"
    assert seen == [("motor-engine-0.motor-engine.motor.svc", 600.0)]
    pod0 = renderer.render({"dp_size": 4}, {**BASE_ENV, "MOTOR_POD_INDEX": "0", "MOTOR_ENGINE_BASE_PORT": "0"}, [],
                           resolve_host=lambda *_: pytest.fail("pod 0 is the master itself"))
    assert pod0["dp_master_ip"] == "10.1.0.7" and pod0["engines"] == [{"dp_rank": 0, "port": 0}, {"dp_rank": 1, "port": 0}]


@pytest.mark.parametrize(("env", "devices", "message"), [
    ({"MOTOR_POD_INDEX": "2"}, [], "beyond dp_size=4"),
    ({"MOTOR_POD_INDEX": "x"}, [], "MOTOR_POD_INDEX='x' is not an integer"),
    ({"MOTOR_POD_IP": ""}, [], "MOTOR_POD_IP is not set"),
    ({"MOTOR_RANKS_PER_POD": "0"}, [], "below 1"),
    ({}, ["Ascend910-0", "Ascend910-1", "Ascend910-2"], "do not split evenly"),
    ({"MOTOR_DP_MASTER_HOST": ""}, [], "MOTOR_DP_MASTER_HOST is not set"),
])
def test_render_refuses_bad_values(env: dict, devices: list, message: str) -> None:
    with pytest.raises(renderer.RenderError, match=re.escape(message)):
        renderer.render({"dp_size": 4}, {**BASE_ENV, **env}, devices, resolve_host=lambda *_: "10.1.0.5")


def test_render_waits_for_the_master_to_resolve_within_its_bound() -> None:
    calls = []

    def lookup(host, port, type):  # noqa: A002 - getaddrinfo's keyword
        calls.append(host)
        if len(calls) < 3:
            raise OSError("Name or service not known")
        return [(2, 1, 6, "", ("10.1.0.5", 0))]

    assert renderer.resolve("h", 60, sleep=lambda _: None, lookup=lookup) == "10.1.0.5" and len(calls) == 3
    assert renderer.resolve("10.9.9.9", 0, lookup=lambda *a, **k: pytest.fail("an IP is not looked up")) == "10.9.9.9"
    with pytest.raises(renderer.RenderError, match="did not resolve within 0s"):
        renderer.resolve("h", 0, sleep=lambda _: None, lookup=lambda *a, **k: (_ for _ in ()).throw(OSError("nx")))


def _downward(annotations: dict[str, str]) -> str:
    """kubelet's downward API annotations file: key="value" per line, Go %q quoting."""
    return "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(annotations.items()))


def test_render_takes_the_cards_the_nodemanager_check_takes_in_card_order() -> None:
    cards = ",".join(f"Ascend910-{i}" for i in (10, 2, 9, 3))
    used, devices = renderer.pod_devices(_downward({"huawei.com/AscendReal": cards, "huawei.com/Ascend910": "Ascend910-0"}))
    assert used == "huawei.com/AscendReal" and devices == ["Ascend910-2", "Ascend910-3", "Ascend910-9", "Ascend910-10"]
    assert renderer.pod_devices(_downward({"huawei.com/Ascend910": "Ascend910-1,Ascend910-0"})) == (
        "huawei.com/Ascend910", ["Ascend910-0", "Ascend910-1"])
    assert renderer.pod_devices("") == ("", [])


def test_render_waits_for_the_device_plugin_within_its_bound() -> None:
    texts = iter([_downward({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}),
                  _downward({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1", "huawei.com/AscendReal": "Ascend910-4,Ascend910-5"})])
    assert renderer.wait_devices(lambda: next(texts), 2, 60, sleep=lambda _: None) == ["Ascend910-4", "Ascend910-5"]
    allocation = _downward({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"})
    assert renderer.wait_devices(lambda: allocation, 2, 0, sleep=lambda _: None) == ["Ascend910-0", "Ascend910-1"]
    assert renderer.wait_devices(lambda: "", 0, 0) == []
    with pytest.raises(renderer.RenderError, match="MOTOR_DEVICES_PER_POD=8: the pod's annotations list 2 cards"):
        renderer.wait_devices(lambda: allocation, 8, 0, sleep=lambda _: None)


def test_render_cli_writes_the_config_or_one_line_and_status_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    template = tmp_path / "nm.yaml"
    template.write_text(yaml.safe_dump({"dp_size": 2, "controller_address": "c:1", "instance_id": 1}))
    annotation = tmp_path / "annotations"
    annotation.write_text(_downward({"huawei.com/AscendReal": "Ascend910-1,Ascend910-0", "other": "x"}))
    out = tmp_path / "out.yaml"
    script = str(K8S / "base/config/render_nodemanager.py")
    env = {**os.environ, **BASE_ENV, "MOTOR_POD_INDEX": "0", "MOTOR_POD_ANNOTATIONS_FILE": str(annotation),
           "MOTOR_DEVICES_PER_POD": "2", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, script, "--template", str(template), "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    cfg = build_config(NodeManagerConfig, yaml.safe_load(out.read_text()))
    assert [(e.dp_rank, e.port, [d.device_id for d in e.device_infos]) for e in cfg.engines] == [
        (0, 8100, ["Ascend910-0"]), (1, 8101, ["Ascend910-1"])]
    proc = subprocess.run([sys.executable, script, "--template", str(template), "--out", str(out)],
                          env={**env, "MOTOR_POD_INDEX": "5"}, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "MOTOR_POD_INDEX=5" in proc.stderr


# -- the Containerfile --------------------------------------------------------------------------

def test_containerfile_is_hadolint_clean() -> None:
    proc = run([tool("hadolint"), "--no-color", str(DEPLOY / "Containerfile")])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_containerfile_shape() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE=") and "python:3.11-slim" in lines[0]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert froms == ["FROM ${BASE_IMAGE} AS runtime", "FROM runtime AS demo"]
    # Each stage ends unprivileged; PID 1 is tini; health is the gRPC health protocol.
    stages = text.split("\nFROM ")
    for stage in stages[1:]:
        users = re.findall(r"^USER (\S+)", stage, re.M)
        assert users and users[-1] == "10001:10001", users
    assert 'ENTRYPOINT ["/usr/local/sbin/tini", "--"]' in text
    assert "HEALTHCHECK" in text and "grpc_health.v1" in text
    # No secret is baked in: nothing is copied from the context, pip settings come as build secrets.
    assert not re.search(r"^\s*(COPY|ADD)\b", text, re.M)
    assert "--mount=type=secret,id=pip.conf" in text and "--mount=type=secret,id=ca.crt" in text
    assert not re.search(r"^\s*ENV\b[^\n]*(KEY|TOKEN|PASSWORD|SECRET)", text, re.M | re.I)
    assert "torch==${TORCH_VERSION}+cpu" in text
