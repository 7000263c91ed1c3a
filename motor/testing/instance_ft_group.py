"""An SGLang-shaped instance for tests: the instance FT manager (``motor.sim.instance_ft``) and
reference-engine ranks linked to it, on one host, started and stopped by pid. Inference goes through
the manager's one endpoint (``url``); the ranks' own clients reach their FT machines and admin routes."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import motor
from motor.common.ports import port_free
from motor.common.process import ManagedProcess, start_process
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster
from motor.testing.waits import wait_for

REPO_ROOT = Path(motor.__file__).resolve().parents[1]
# Store ports come from below Linux's ephemeral range (32768 on): a port picked in it can be taken by
# any outgoing connection on the machine before a rebuild binds it.
_STORE_PORTS = range(20000, 32000)
_STORE_PORT_TRIES = 200


def store_port_base(host: str, dp_size: int) -> int:
    """A base whose every port a rebuild may bind (base + up to 2 x dp_size) is free now, to any socket."""
    span = 2 * dp_size + 1
    rng = random.Random()
    for _ in range(_STORE_PORT_TRIES):
        base = rng.randrange(_STORE_PORTS.start, _STORE_PORTS.stop - span)
        if all(port_free(host, base + i, ignore_time_wait=False) for i in range(span)):
            return base
    raise RuntimeError(f"no {span} free store ports on {host} in {_STORE_PORTS.start}-{_STORE_PORTS.stop - 1} "
                       f"after {_STORE_PORT_TRIES} tries")


@dataclass
class InstanceFtGroup:
    manager: ManagedProcess
    host: str
    port: int
    ranks: SimCluster

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def client(self) -> SimClient:
        return SimClient(self.url, timeout_sec=20)

    def admin(self) -> dict[str, Any]:
        return self.client.admin_state()

    def pinned(self, rank: int) -> int:
        """Inference requests that named ``rank`` in routed_dp_rank so far (admitted or not)."""
        return int(self.admin()["pinned_requests"].get(str(rank), 0))

    def stop(self) -> None:
        try:
            self.ranks.stop(grace_sec=5)
        finally:
            self.manager.stop(grace_sec=5)

    @classmethod
    def start(cls, run_dir: Path, dp_size: int = 2, *, host: str = "127.0.0.1", token_latency_sec: float = 0.005,
              extra_args: list[str] | None = None) -> InstanceFtGroup:
        """Starts the manager, then the ranks, and waits until every rank is active for inference."""
        ready = run_dir / "manager.ready.json"
        manager = start_process(
            [sys.executable, "-m", "motor.sim.instance_ft", "--dp-size", str(dp_size), "--host", host, "--port", "0",
             "--ready-file", str(ready), "--enable-fault-injection", "--dp-store-port-base", str(store_port_base(host, dp_size)),
             "--ft-timeout-sec", "30"],
            log_path=run_dir / "manager.log", name="ft-manager", cwd=REPO_ROOT)
        try:
            port = int(manager.wait_ready_file(ready, 30, required_keys=["port"])["port"])
            ranks = SimCluster.start(run_dir, dp_size, hosts=[host] * dp_size, cwd=REPO_ROOT, ready_timeout_sec=90,
                                     extra_args=[
                "--enable-fault-tolerance", "--enable-fault-injection", "--ft-dialect", "sglang", "--diagnosing-sec",
                "0", "--ft-manager-address", f"{host}:{port}", "--num-experts", "2", "--num-redundant-experts", "2",
                "--per-token-latency-sec", str(token_latency_sec), "--collective-timeout-sec", "3",
                "--engine-recovery-timeout-sec", "20", *(extra_args or [])])
        except BaseException:
            manager.stop(grace_sec=5)
            raise
        group = cls(manager, host, port, ranks)
        try:
            wait_for(lambda: group.admin()["active_ranks"], 30, "every rank active",
                     until=lambda a: a == list(range(dp_size)), ignoring=OSError)
        except BaseException:
            group.stop()
            raise
        return group
