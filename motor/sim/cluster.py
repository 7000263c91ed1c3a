"""Launch a DP group of ``motor-engine-sim`` processes on this machine (tests, benchmark, demos).

Each rank is its own process group, logs to ``<run_dir>/rank<r>.log`` and announces its HTTP port
in ``<run_dir>/rank<r>.ready.json``. Ranks may sit on different loopback addresses to emulate pods.
``start_joiner`` replaces one rank's processes by a ``--join`` process for an elastic scale-up
(``<run_dir>/rank<r>.join<n>.log``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import motor
from motor.common.ports import free_port
from motor.common.process import ManagedProcess, ProcessError, start_process
from motor.sim.client import SimClient
from motor.sim.zygote import start_zygote


@dataclass
class SimRank:
    rank: int
    host: str
    proc: ManagedProcess
    ready_file: Path
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, timeout_sec: float = 10.0) -> SimClient:
        return SimClient(self.url, timeout_sec=timeout_sec)


def engine_argv(rank: int, dp_size: int, *, host: str, master_ip: str, master_port: int,
                ready_file: Path, extra_args: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable, "-m", "motor.sim.main",
        "--dp-rank", str(rank), "--dp-size", str(dp_size),
        "--dp-master-ip", master_ip, "--dp-master-port", str(master_port),
        "--host", host, "--port", "0", "--ready-file", str(ready_file),
        *extra_args,
    ]


@dataclass
class SimCluster:
    run_dir: Path
    master_ip: str
    master_port: int
    ranks: list[SimRank] = field(default_factory=list)
    startup_sec: float = 0.0
    extra_args: tuple[str, ...] = ()
    cwd: Path | None = None
    joins: int = 0
    zygote: ManagedProcess | None = None

    @classmethod
    def start(
        cls,
        run_dir: str | Path,
        dp_size: int,
        *,
        hosts: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout_sec: float = 120.0,
        cwd: str | Path | None = None,
        zygote: bool | str = True,
    ) -> SimCluster:
        """Start ``dp_size`` ranks (rank r on ``hosts[r]``) and wait until every one serves; with
        ``zygote`` their executors fork from one ``motor.sim.zygote`` (torch imported once): the
        group's own, or the running one at that address.

        On failure every started process is stopped before the error propagates.
        """
        # ``python -m motor.sim.main`` must import this very package, installed or not.
        if cwd is None:
            cwd = Path(motor.__file__).resolve().parents[1]
        run = Path(run_dir)
        run.mkdir(parents=True, exist_ok=True)
        host_list = list(hosts) if hosts is not None else ["127.0.0.1"] * dp_size
        if len(host_list) != dp_size:
            raise ValueError(f"hosts has {len(host_list)} entries for dp_size {dp_size}")
        master_ip = host_list[0]
        cluster = cls(run_dir=run, master_ip=master_ip, master_port=free_port(master_ip),
                      extra_args=tuple(extra_args), cwd=Path(cwd))
        started = time.monotonic()
        try:
            if zygote:
                address = zygote
                if not isinstance(address, str):
                    cluster.zygote, address = start_zygote(run, ready_timeout_sec, cwd=Path(cwd))
                cluster.extra_args = (*cluster.extra_args, "--executor-zygote", address)
                extra_args = cluster.extra_args
            for rank, host in enumerate(host_list):
                ready = run / f"rank{rank}.ready.json"
                ready.unlink(missing_ok=True)
                argv = engine_argv(rank, dp_size, host=host, master_ip=master_ip, master_port=cluster.master_port,
                                   ready_file=ready, extra_args=extra_args)
                proc = start_process(argv, log_path=run / f"rank{rank}.log", name=f"sim-rank{rank}", cwd=cwd)
                cluster.ranks.append(SimRank(rank=rank, host=host, proc=proc, ready_file=ready))
            deadline = time.monotonic() + ready_timeout_sec
            for r in cluster.ranks:
                doc = r.proc.wait_ready_file(r.ready_file, max(0.1, deadline - time.monotonic()), required_keys=("port",))
                r.port = int(doc["port"])
        except BaseException:
            cluster.stop()
            raise
        cluster.startup_sec = time.monotonic() - started
        return cluster

    def start_joiner(self, rank: int, *, ready_timeout_sec: float = 120.0,
                     extra_args: Sequence[str] = ()) -> SimRank:
        """Stop rank ``rank``'s processes (by pid) and start a ``--join`` process for it on the same
        host with the group's flags (+ ``extra_args``); returns it once it serves."""
        old = self.ranks[rank]
        old.proc.stop(5.0)
        self.joins += 1
        ready = self.run_dir / f"rank{rank}.join{self.joins}.ready.json"
        ready.unlink(missing_ok=True)
        argv = engine_argv(rank, len(self.ranks), host=old.host, master_ip=self.master_ip,
                           master_port=self.master_port, ready_file=ready,
                           extra_args=[*self.extra_args, *extra_args, "--join"])
        proc = start_process(argv, log_path=self.run_dir / f"rank{rank}.join{self.joins}.log",
                             name=f"sim-rank{rank}-join{self.joins}", cwd=self.cwd)
        joiner = SimRank(rank=rank, host=old.host, proc=proc, ready_file=ready)
        self.ranks[rank] = joiner
        doc = proc.wait_ready_file(ready, ready_timeout_sec, required_keys=("port",))
        joiner.port = int(doc["port"])
        return joiner

    def client(self, rank: int, timeout_sec: float = 10.0) -> SimClient:
        return self.ranks[rank].client(timeout_sec)

    def stop(self, grace_sec: float = 5.0) -> None:
        """Stop every rank by pid (process group); keeps going past individual failures."""
        errors = []
        for proc in [r.proc for r in self.ranks] + ([self.zygote] if self.zygote is not None else []):
            try:
                proc.stop(grace_sec)
            except ProcessError as exc:
                errors.append(str(exc))
        if errors:
            raise ProcessError("; ".join(errors))
