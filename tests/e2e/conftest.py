"""E2E fixtures: a LocalCluster per test (real processes on loopback) and an artifact folder per test.

Engines: `start_cluster()` runs the reference engines (a process per rank, real gloo groups);
`start_cluster(engines="light")` runs every rank of the instance in one fake group process
(`motor.launch.engines.LightEngines`: the same vLLM-dialect FT protocol, fault names and toy tokens,
no torch), with placeholders that report their restarts so whole-instance reconfiguration works.
The rows that need what only the reference engine shows (real gloo group rebuilds, completions
streams continued from token ids, the RFC-era dialect, an idle group that does not step, mTLS over
the real stack) run on it; the others on the light engines.

Artifacts go to $MOTOR_E2E_OUT (default runs/e2e-<date>) / <test name>/: the process logs, and
artifacts.json with what RFC §8 asks every case to keep: the injection (command and target rank),
engine and controller timelines, apply bodies and their 202s, dead_committed, the coordinator
endpoint set, pod stops, and inference after recovery.

Transport: every row runs plaintext; the row in MTLS_ROWS runs a second time with mTLS and roles on
every contract (`ClusterSpec(tls=True)`: certificates in <run dir>/pki, HTTPS status page and OpenAI
front, TLS etcd where the row starts one), as test ids ``[plain]`` and ``[mtls]``. MOTOR_E2E_MTLS=0
runs the plaintext ones only; MOTOR_E2E_MTLS=all runs every row of the matrix with mTLS too (about
twice the e2e time; `make test` runs the one row).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from motor.cli.motorctl import run as motorctl
from motor.launch.cluster import LocalCluster
from motor.launch.engines import EngineBackend, LightEngines, ReferenceEngines
from motor.launch.spec import ClusterSpec
from motor.testing.artifacts import Artifacts as SharedArtifacts
from motor.testing.artifacts import artifacts_root, run_folder

REPO = Path(__file__).resolve().parents[2]

# The row run with mTLS too: a scale-down under load through the HTTPS OpenAI front, every
# service's /metrics over HTTPS, and the NodeManager's FT proxy called as the Controller's role.
MTLS_ROWS = frozenset({"test_ordinary_rank_under_load"})
MTLS_MODE = os.environ.get("MOTOR_E2E_MTLS", "1")
if MTLS_MODE not in ("0", "1", "all"):
    raise pytest.UsageError(f"MOTOR_E2E_MTLS={MTLS_MODE!r}: expected 0 (plain only), 1 (the MTLS_ROWS too) or all")
TRANSPORTS = ("plain", "mtls") if MTLS_MODE != "0" else ("plain",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "transport" in metafunc.fixturenames and (MTLS_MODE == "all" or metafunc.function.__name__ in MTLS_ROWS):
        metafunc.parametrize("transport", TRANSPORTS, indirect=True)
OUT = artifacts_root(REPO / "runs", "e2e")


class Artifacts(SharedArtifacts):
    """The shared artifacts of a test, with what every e2e row keeps (RFC 575 §8): the injections,
    the inference after recovery, and the Controller's and Coordinator's views (`collect`)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, injections=[], inference_after_recovery=[])

    def injection(self, cluster: LocalCluster, rank: int, fault: str, **params: Any) -> dict[str, Any]:
        answer = cluster.inject(rank, fault, **params)
        self.event("injections", rank=rank, fault=fault, params=params,
                   command=f"motorctl inject {cluster.engine_url(rank)} {fault}", answer=answer)
        return answer

    def collect(self, cluster: LocalCluster) -> dict[str, Any]:
        """Snapshot of the controller and coordinator views; apply bodies and pod stops from the timeline."""
        runtime = cluster.runtime()
        timeline = cluster.timeline()
        self.data.update({
            "runtime": runtime,
            "dead_committed": runtime["dead_committed"] if runtime else None,
            "controller_timeline": timeline,
            "coordinator_endpoints": cluster.published(),
            "applies": [dict(e, request_id=t["request_id"]) for t in timeline for e in t["events"] if e["name"] == "apply"],
            "pod_stops": [dict(e, request_id=t["request_id"]) for t in timeline for e in t["events"] if e["name"] == "stop_pod"],
        })
        if isinstance(cluster.engines, LightEngines):
            self.data["engine_journal"] = cluster.journal()[1]  # the light group's transitions
        return self.data


@pytest.fixture
def run_dir(request: pytest.FixtureRequest) -> Path:
    return run_folder(OUT, request.node.name)


@pytest.fixture
def artifacts(run_dir: Path) -> Iterator[Artifacts]:
    arts = Artifacts(run_dir)
    try:
        yield arts
    finally:
        arts.save()


@pytest.fixture
def hw_fault(artifacts: Artifacts, run_dir: Path):
    """hw_fault(*motorctl argv) → motorctl's answer; the command and answer go to the injections.
    Under the mtls transport motorctl speaks mTLS as the operator (the cluster's PKI in the run dir)."""
    def run(*argv: str) -> str:
        out = io.StringIO()
        pki = run_dir / "pki"
        tls = ["--tls-dir", str(pki)] if (pki / "operator.crt").exists() else []
        assert motorctl([*tls, *argv], out=out) == 0, out.getvalue()
        answer = out.getvalue().strip()
        artifacts.data["injections"].append({"at_unix_sec": time.time(), "command": "motorctl " + " ".join(argv),
                                             "answer": answer})
        return answer
    return run


@pytest.fixture
def configmap_dir(run_dir: Path) -> Path:
    """The directory of mounted MindCluster ConfigMaps the Controller watches (`hardware_overrides`)."""
    folder = run_dir / "configmaps"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def hardware_overrides(configmap_dir: Path) -> dict[str, Any]:
    """Controller overrides for the hardware rows: the ConfigMap directory source polled every 0.3 s,
    no Kubernetes, and an FT collection long enough that only the hardware path decides."""
    return {
        "hardware_monitor.configmap_dir": str(configmap_dir),
        "hardware_monitor.poll_interval_sec": 0.3,
        "hardware_monitor.kubernetes": "off",
        "fault_tolerance_config.software_status_collection_timeout_sec": 30.0,
    }


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    """"plain" or "mtls" (the MTLS_ROWS, or every row with MOTOR_E2E_MTLS=all, are parametrized)."""
    return getattr(request, "param", "plain")


def light_engines(**overrides: Any) -> LightEngines:
    """The light engines as the e2e rows run them: restartable, the reference engine's 5 ms per token
    and diagnosing phase, its check-in window."""
    return LightEngines(**{"restartable": True, "per_token_latency_sec": 0.005, "diagnosing_sec": 1.5,
                           "checkin_sec": 10.0, **overrides})


def _backend(engines: str | EngineBackend, executor_zygote: str) -> EngineBackend:
    if not isinstance(engines, str):
        if isinstance(engines, ReferenceEngines):
            engines.use_zygote(executor_zygote)
        return engines
    if engines == "reference":
        return ReferenceEngines(zygote_address=executor_zygote)
    if engines == "light":
        return light_engines()
    raise ValueError(f"engines={engines!r}: expected 'reference', 'light' or an EngineBackend")


@pytest.fixture
def start_cluster(run_dir: Path, artifacts: Artifacts, transport: str, executor_zygote: str):
    """start_cluster(engines="reference" | "light" | an EngineBackend, **ClusterSpec fields); the
    reference engines fork their executors from the session's zygote."""
    started: list[LocalCluster] = []

    def start(engines: str | EngineBackend = "reference", **spec_kwargs: Any) -> LocalCluster:
        spec_kwargs.setdefault("tls", transport == "mtls")
        backend = _backend(engines, executor_zygote)
        artifacts.record("engines", "light" if isinstance(backend, LightEngines) else "reference")
        cluster = LocalCluster(ClusterSpec(**spec_kwargs), run_dir, engines=backend)
        started.append(cluster)
        return cluster.start()

    try:
        yield start
    finally:
        for cluster in started:
            try:
                if cluster.controller is not None and cluster.controller.proc.running:
                    artifacts.collect(cluster)
            except Exception as exc:  # noqa: BLE001 - artifacts must not mask the test's own failure
                artifacts.record("collect_error", repr(exc))
            cluster.stop()
