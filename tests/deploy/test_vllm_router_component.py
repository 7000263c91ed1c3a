"""deploy/k8s/components/vllm-router: on the dev overlay it renders and validates strictly, the
Controller's added arguments make a config the model accepts that publishes to the router's stable
name, the router starts with no workers, and the network policies let it reach the engines' OpenAI
ports while leaving the base's policies as they are."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from .deploy_helpers import K8S, K8S_VERSIONS, find, render, run, tool

from motor.common.config.loader import load_config, parse_override
from motor.controller.config import ControllerConfig

COMPONENT = "components/vllm-router"


def _render(tmp_path: Path) -> tuple[list[dict], Path]:
    overlay = tmp_path / "with-router"
    overlay.mkdir()
    rel = os.path.relpath(K8S, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/overlays/dev"], "components": [f"{rel}/{COMPONENT}"]}))
    proc = run([tool("kubectl"), "kustomize", str(overlay)])
    assert proc.returncode == 0, proc.stderr
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(proc.stdout)
    return [d for d in yaml.safe_load_all(proc.stdout) if d], rendered


def test_the_component_renders_validates_and_publishes_to_the_router_by_its_stable_name(tmp_path: Path) -> None:
    docs, rendered = _render(tmp_path)
    for version in K8S_VERSIONS:
        proc = run([tool("kubernetes-validate"), "--strict", "--quiet", "-k", version, str(rendered)])
        assert proc.returncode == 0, f"{version}:\n{proc.stdout}{proc.stderr}"
    args = find(docs, "Deployment", "motor-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    overrides = [parse_override(args[i + 1]) for i, a in enumerate(args) if a == "--set"]
    # Parsed as motor-controller parses them (the overlay's other overrides are its own tests' business).
    config = load_config(ControllerConfig, None, [o for o in overrides if o[0].startswith("publication.")]).publication
    assert config.publishers == ["coordinator", "vllm_router"]
    router = find(docs, "StatefulSet", "vllm-router")
    service = find(docs, "Service", "vllm-router")
    assert service["spec"]["clusterIP"] == "None" and router["spec"]["serviceName"] == "vllm-router"
    assert [r.url for r in config.vllm_routers] == ["http://vllm-router-0.vllm-router.motor.svc:30000"]
    router_args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--worker-urls" not in router_args, "the Controller owns the worker list"
    assert router_args[router_args.index("--port") + 1] == "30000"


def test_the_router_reaches_the_engines_and_the_base_policies_stay(tmp_path: Path) -> None:
    docs, _ = _render(tmp_path)
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    dev = {d["metadata"]["name"]: d for d in render("overlays/dev") if d["kind"] == "NetworkPolicy"}
    assert all(policies[name]["spec"] == doc["spec"] for name, doc in dev.items())
    extra = policies["motor-engine-ingress-from-vllm-router"]["spec"]
    assert extra["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "motor-engine"}
    rule = extra["ingress"][0]
    assert rule["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm-router"}
    coordinator_rule = next(r for r in dev["motor-engine-ingress"]["spec"]["ingress"]
                            if r["from"][0].get("podSelector", {}).get("matchLabels", {}).get(
                                "app.kubernetes.io/name") == "motor-coordinator")
    assert rule["ports"] == coordinator_rule["ports"], "the same OpenAI ports the Coordinator may reach"
