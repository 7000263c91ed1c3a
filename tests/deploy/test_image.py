"""The image, built and run here: deploy/Containerfile on a debootstrap minbase (podman + runc), then a
whole local cluster from containers with host networking (Controller and Coordinator from the runtime
image, NodeManagers with reference engines on 127.0.0.130 / .131 from the demo image) passes one DP
scale-down round under load: executor death on rank 1 through the reference engine's admin route →
SCALED_DOWN_RUNNING with dead_committed [1], no failed request, completions after the round. Every
container and image it made is removed, which the test checks.

Runs under `make image-test` (MOTOR_IMAGE_TEST=1, after the rest of `make test`); skipped where podman
cannot run a container at all. Numbers (image sizes, build and load times, fault → published) go to
<run dir>/image-test.json and one summary line.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from motor.common.config.loader import build_config
from motor.launch.spec import ClusterSpec
from motor.testing.waits import wait_for
from nodemanager.config import NodeManagerConfig

from .container_cluster import IMAGE_UID, ContainerCluster
from .deploy_helpers import IMAGE_TEST, K8S, REPO
from .image_build import CONTAINER_PREFIX, BuildReport, Podman, ensure_images

pytestmark = pytest.mark.timeout(1200)

ROUND_SEC = 60.0


@pytest.fixture
def podman() -> Podman:
    if not IMAGE_TEST:
        pytest.skip("the image test runs in `make image-test` (MOTOR_IMAGE_TEST=1), after the other tests")
    pm = Podman()
    reason = pm.unusable()
    if reason is not None:
        pytest.skip(f"podman cannot run containers here: {reason}")
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is missing (Debian's debootstrap; `make image-test` installs it)")
    # A previous run that was killed left containers; images stay, `make image-build` may have
    # built this tree's (the end of this test removes every image).
    pm.remove_containers()
    try:
        yield pm
    finally:
        pm.remove_all()


@pytest.fixture
def run_dir() -> Path:
    folder = REPO / "runs" / time.strftime("image-test-%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _fault_to_published(txn: dict, injected_at: float) -> dict[str, float]:
    events = txn["events"]
    at = {e["name"]: e["at_unix_sec"] for e in reversed(events)}  # first occurrence of each name
    publish = next(e["at_unix_sec"] for e in events if e["name"] == "publish" and "ADD" in e["detail"])
    first_evidence = min(e["at_unix_sec"] for e in events if e["kind"] == "evidence")
    return {
        "fault_to_first_report_sec": round(first_evidence - injected_at, 3),
        "fault_to_decision_sec": round(at["scale_down"] - injected_at, 3),
        "round_sec": round(txn["ended_at_unix_sec"] - txn["started_at_unix_sec"], 3),
        "fault_to_published_sec": round(publish - injected_at, 3),
    }


def _render_step_in_the_image(podman: Podman, image: str, run_dir: Path) -> str:
    """The engine pod's init container (deploy/k8s/base/engine.yaml) as the image runs it: its
    template and script from the ConfigMap, the pod's annotations from the downward API."""
    podinfo, out = run_dir / "podinfo", run_dir / "render"
    podinfo.mkdir()
    out.mkdir()
    os.chown(out, IMAGE_UID, IMAGE_UID)
    (podinfo / "annotations").write_text('huawei.com/AscendReal="Ascend910-3,Ascend910-2"\n')
    env = {"MOTOR_POD_INDEX": "1", "MOTOR_POD_IP": "127.0.0.3", "MOTOR_NODE_NAME": "node-b", "MOTOR_RANKS_PER_POD": "2",
           "MOTOR_DP_MASTER_HOST": "127.0.0.2", "MOTOR_ENGINE_BASE_PORT": "8100", "MOTOR_DEVICES_PER_POD": "2",
           "MOTOR_POD_ANNOTATIONS_FILE": "/etc/motor/podinfo/annotations"}
    proc = podman("run", "--rm", "--name", f"{CONTAINER_PREFIX}{os.getpid()}-render", "--network", "none", "--read-only",
                  "-v", f"{K8S / 'base/config'}:/etc/motor/config:ro", "-v", f"{podinfo}:/etc/motor/podinfo:ro",
                  "-v", f"{out}:/run/motor", *[a for k, v in env.items() for a in ("--env", f"{k}={v}")], image,
                  "python", "/etc/motor/config/render_nodemanager.py", "--template", "/etc/motor/config/nodemanager.yaml",
                  "--out", "/run/motor/nodemanager.yaml", timeout_sec=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = build_config(NodeManagerConfig, yaml.safe_load((out / "nodemanager.yaml").read_text()))
    assert [(e.dp_rank, e.port, [d.device_id for d in e.device_infos]) for e in config.engines] == [
        (2, 8100, ["Ascend910-2"]), (3, 8101, ["Ascend910-3"])]
    assert config.dp_master_ip == "127.0.0.2" and config.pod_ip == "127.0.0.3" and config.node_name == "node-b"
    return proc.stdout.strip()


def test_containerized_cluster_scale_down_round(podman: Podman, run_dir: Path, capsys) -> None:
    report = BuildReport()
    log = run_dir / "image-build.log"
    runtime, demo = ensure_images(podman, log, report)
    result: dict = {"build": report.__dict__}
    result["render_step"] = _render_step_in_the_image(podman, demo, run_dir)
    # Pods of its own (127.0.0.130 on): it runs while the e2e rows may still run on theirs.
    spec = ClusterSpec(first_pod_ip=130)
    cluster = ContainerCluster(spec, run_dir, podman, runtime, demo)
    try:
        start = time.monotonic()
        cluster.start(ready_timeout_sec=180)
        result["cluster_serving_sec"] = round(time.monotonic() - start, 2)
        health = cluster.healthchecks()
        result["healthchecks"] = health
        assert all(code == 0 for code, _ in health.values()), health
        assert cluster.runtime()["alive_dp_ranks"] == [0, 1, 2, 3]

        load = cluster.load_generator(concurrency=4, max_tokens=8, max_duration_sec=120).start()
        try:
            wait_for(lambda: load.counts()["succeeded"] >= 8, 60.0, "8 completions under load")
            result["injection"] = cluster.inject(1, "executor_death")
            injected_at = time.time()  # when the admin route answered, as the e2e artifacts record it
            rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
            serving_at = time.time()  # after the survivors' publication, so `after` below holds these
            wait_for(lambda: len([r for r in load.snapshot() if r.started_sec > serving_at]) >= load.concurrency,
                     60.0, "requests answered after the round")
        finally:
            load.stop()
        assert rt["phase"] == "SCALED_DOWN_RUNNING" and rt["dead_committed"] == [1] and rt["can_serve"], rt
        assert cluster.published() == {spec.instance_id: [0, 2, 3]}
        txn = cluster.timeline()[-1]
        assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded", txn
        result["round"] = _fault_to_published(txn, injected_at)
        counts = load.counts()
        result["load"] = counts
        assert counts["succeeded"] > 0 and counts["failed"] == 0, counts
        published_at = injected_at + result["round"]["fault_to_published_sec"]
        after = [r for r in load.snapshot() if r.started_sec > published_at]
        assert after and all(r.ok for r in after), [r.error for r in after if not r.ok]
        probe = cluster.load_generator(concurrency=1, max_tokens=4)
        answers = [probe.send_one(f"after the round {i}") for i in range(4)]
        assert all(a.ok for a in answers) and {a.rank for a in answers} <= {0, 2, 3}, [a.error for a in answers]
        result["completions_after_round"] = len(after) + len(answers)
    finally:
        cluster.stop()
        result["exit_codes_after_sigterm"] = cluster.exit_codes
        (run_dir / "image-test.json").write_text(json.dumps(result, indent=2, default=str))
    # SIGTERM to PID 1 (tini) stops every service gracefully.
    assert cluster.exit_codes and all(code == 0 for code in cluster.exit_codes.values()), cluster.exit_codes
    podman.remove_all()
    assert podman.leftovers() == {"containers": [], "images": []}
    sizes = {k: f"{v / 1e6:.0f} MB" for k, v in report.sizes_bytes.items()}
    with capsys.disabled():
        print(f"\nimage-test: cache {report.cache} times {report.timings_sec} sizes {sizes} "
              f"serving after {result['cluster_serving_sec']}s round {result['round']} load {counts} "
              f"-> {run_dir / 'image-test.json'}")
