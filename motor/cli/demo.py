"""`motor demo`: the local-cluster scale-down demo on embedded defaults.

Starts a controller (in-memory store), a coordinator and two NodeManagers on 127.0.0.2 and
127.0.0.3, each hosting two reference-engine ranks of one DP=4 instance with redundant experts;
drives a steady stream of completions through the coordinator; kills the executor of rank 1, then
of rank 0; shows the timelines and the alive ranks after each round; reports request counts; tears
everything down. Exits non-zero when any expectation fails; on SIGTERM it tears everything down and
exits with status 143. With --tls every contract runs with mTLS and roles (certificates in
<run dir>/pki); without it everything is plaintext, which is what the demo is for.

It prints the operator console's URL (the Controller's /ui, docs/console.md) once the cluster
serves; with --keep the cluster stays up after the rounds, for a person to watch and poke at, until
Ctrl-C or SIGTERM.

With --ha two Controller replicas share an etcd server started in the run directory (one leads by
an etcd lease, the other stands by); the leader is SIGKILLed in the middle of the second round, and
the demo shows the standby taking over (the interrupted round becomes a whole-instance
reconfiguration, never a second apply) and the recovery completing under the new leader.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.cli.stage_bar import stage_bar
from motor.launch.cluster import LocalCluster
from motor.launch.load import LoadGenerator
from motor.launch.shutdown import Terminated, exit_on_sigterm, sigterm_deferred
from motor.launch.spec import ClusterSpec


class Progress:
    """One status line, refreshed in place on a terminal and every few seconds otherwise."""

    def __init__(self, cluster: LocalCluster, load: LoadGenerator) -> None:
        self.cluster, self.load = cluster, load
        self._stop = threading.Event()
        self._tty = sys.stdout.isatty()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._tty:
            print()

    def _run(self) -> None:
        last_print = 0.0
        while not self._stop.wait(0.5):
            rt = self.cluster.runtime(timeout_sec=1.0) or {}
            c = self.load.counts()
            line = (f"  phase={rt.get('phase', '?'):<22} alive={rt.get('alive_dp_ranks', '?')!s:<14} "
                    f"requests sent={c['sent']} ok={c['succeeded']} failed={c['failed']}")
            if self._tty:
                print("\r" + line.ljust(100), end="", flush=True)
            elif time.monotonic() - last_print >= 3.0:
                print(line, flush=True)
                last_print = time.monotonic()


def print_timeline(txn: dict[str, Any]) -> None:
    took = txn["ended_at_unix_sec"] - txn["started_at_unix_sec"] if txn["ended_at_unix_sec"] else 0.0
    print(f"  {txn['strategy']} request_id={txn['request_id']} {txn['outcome']} in {took:.2f}s")
    for e in txn["events"]:
        offset = e["at_unix_sec"] - txn["started_at_unix_sec"]
        call = f" -> {e['target']} [{e['outcome']}, {e['duration_sec'] * 1000:.0f} ms]" if e["kind"] == "call" else ""
        detail = f"  {e['detail']}" if e["detail"] else ""
        if len(detail) > 160:
            detail = detail[:157] + "..."
        print(f"    +{offset:6.2f}s {e['kind']:<8} {e['name']}{call}{detail}")


def print_stage_bar(cluster: LocalCluster) -> None:
    """The last round as a stage bar, from the typed timeline (GetTimeline: the stages need its fields)."""
    with cluster.grpc_channel(cluster.controller_address) as channel:
        resp = controller_pb2_grpc.ControllerStub(channel).GetTimeline(
            controller_pb2.GetTimelineRequest(instance_id=cluster.spec.instance_id, limit=1), timeout=10)
    if resp.transactions:
        unicode = "utf" in (sys.stdout.encoding or "").lower()
        print("\n".join("  " + line for line in stage_bar(resp.transactions[-1], unicode=unicode).splitlines()))


HA_LEASE_TTL_SEC = 2
# Slow rebuilds of the second round's survivors keep it in flight long enough to kill the leader there.
HA_REBUILD_DELAY_SEC = 3.0
MID_ROUND = ("DECIDING", "WAITING_ENGINE_FAULT", "SCALING_DOWN", "POST_SCALE_CLEANUP")


def _scale_down_applies(cluster: LocalCluster) -> dict[str, dict[int, int]]:
    """request_id → rank → scale_down applies the engines themselves received (their journals)."""
    rounds: dict[str, dict[int, int]] = {}
    for rank in range(cluster.spec.dp_size):
        for entry in cluster.engine_applies(rank):
            if entry.get("instruction") == "scale_down":
                per_rank = rounds.setdefault(entry["request_id"], {})
                per_rank[rank] = per_rank.get(rank, 0) + 1
    return rounds


def _leader_line(cluster: LocalCluster) -> str:
    parts = []
    for svc in cluster.controllers:
        lead = (cluster.controller_status(svc) or {}).get("leadership") or {}
        role = "leader" if lead.get("is_leader") else "standby" if svc.proc.running else "down"
        parts.append(f"{svc.name}={role}" + (f" (term {lead['term']})" if lead.get("is_leader") else ""))
    return ", ".join(parts)


def _ha_second_round(cluster: LocalCluster, expect, round_timeout_sec: float) -> None:
    """Round 2 with the leader SIGKILLed in the middle: the standby takes over and recovers."""
    for rank in (2, 3):
        cluster.inject(rank, "slow_rebuild", delay_sec=HA_REBUILD_DELAY_SEC)
    leader = cluster.leader()
    print(f"\n> killing the executor of rank 0, then SIGKILL of the leader {leader.name} in the middle of the round")
    cluster.inject(0, "executor_death")
    rt = cluster.wait_until(lambda rt: rt["phase"] in MID_ROUND, round_timeout_sec, "the second round in flight")
    killed_at = time.monotonic()
    killed_wall = time.time()
    cluster.kill_controller(leader)
    print(f"\n  killed {leader.name} in {rt['phase']} (request_id {rt['request_id']})")
    new = cluster.leader(timeout_sec=round_timeout_sec, exclude=leader)
    took = time.monotonic() - killed_at
    print(f"  takeover: {new.name} leads and acts {took:.1f}s after the kill (lease ttl {HA_LEASE_TTL_SEC}s); "
          f"{_leader_line(cluster)}")
    expect(new is not leader, f"the standby {new.name} took over")
    restored = cluster.runtime() or {}
    print(f"  {new.name} restored the instance from etcd: phase={restored.get('phase')} "
          f"dead_committed={restored.get('dead_committed')} ({restored.get('last_error') or 'no error'})")
    t0 = time.monotonic()
    rt = cluster.wait_until(lambda rt: rt["can_serve"] and rt["phase"] in ("NORMAL", "SCALED_DOWN_RUNNING"),
                            round_timeout_sec * 3, "recovery under the new leader")
    print(f"\n  recovered under {new.name} in {time.monotonic() - t0:.1f}s: phase={rt['phase']} "
          f"alive={rt['alive_dp_ranks']} dead_committed={rt['dead_committed']}")
    txns = [t for t in cluster.timeline() if t["started_at_unix_sec"] >= killed_wall]
    for txn in txns:
        print_timeline(txn)
    if rt["phase"] == "NORMAL":
        expect([t["strategy"] for t in txns] == ["instance_reconfiguration"],
               "the interrupted round became a whole-instance reconfiguration (RFC §5 restart rule)")
        expect(rt["alive_dp_ranks"] == [0, 1, 2, 3] and rt["dead_committed"] == [], "every rank serves again")
    else:
        expect(rt["alive_dp_ranks"] == [2, 3], "the committed round was restored, not replayed")
    repeated = {rid: ranks for rid, ranks in _scale_down_applies(cluster).items() if any(n > 1 for n in ranks.values())}
    expect(not repeated, "no engine was sent an apply twice (nothing replayed)")
    published = cluster.published().get(cluster.spec.instance_id, [])
    expect(published == rt["alive_dp_ranks"], f"coordinator routes to {published}")


def print_console(cluster: LocalCluster) -> None:
    print(f"  operator console: {cluster.controller_http}/ui/")
    if cluster.pki is not None:
        pki = cluster.pki.directory
        print(f"    (mTLS: a monitor or operator client certificate is needed, e.g. curl --cacert {pki}/ca.crt "
              f"--cert {pki}/operator.crt --key {pki}/operator.key {cluster.controller_http}/ui/api/fleet)")


def keep_up(cluster: LocalCluster, failures: list[str]) -> None:
    """Leaves the cluster up until Ctrl-C (returns) or SIGTERM (raises Terminated)."""
    held = "all expectations held" if not failures else f"{len(failures)} expectation(s) failed"
    print(f"\nmotor demo: {held}; the cluster stays up (--keep). Operator console: {cluster.controller_http}/ui/")
    print(f"  inject a fault: motorctl inject {cluster.engine_url(2)} executor_death ; Ctrl-C stops everything")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        print()


def run_demo(run_dir: Path, round_timeout_sec: float, tls: bool = False, ha: bool = False, keep: bool = False) -> int:
    failures: list[str] = []

    def expect(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            failures.append(what)

    spec = ClusterSpec(dp_size=4, ranks_per_pod=2, instance_id=1, tls=tls)
    if ha:
        spec.start_etcd, spec.controller_replicas, spec.leader_lease_ttl_sec = True, 2, HA_LEASE_TTL_SEC
    print(f"motor demo: starting {'2 controller replicas on a local etcd' if ha else 'controller'}, coordinator, "
          f"2 NodeManagers, 4 engines (logs in {run_dir})")
    cluster = LocalCluster(spec, run_dir)
    if cluster.pki is not None:
        print(f"  mTLS on every contract, roles from certificates in {cluster.pki.directory} "
              f"(motorctl --tls-dir {cluster.pki.directory} status)")
    load: LoadGenerator | None = None
    try:
        started = time.monotonic()
        cluster.start()
        print(f"  cluster serving ranks {cluster.runtime()['alive_dp_ranks']} after {time.monotonic() - started:.1f}s; "
              f"coordinator {cluster.coordinator_http}")
        print_console(cluster)
        if ha:
            print(f"  controllers: {_leader_line(cluster)}; etcd {cluster.etcd.endpoint if cluster.etcd else '-'}")
        load = cluster.load_generator(concurrency=4, max_tokens=8, max_duration_sec=round_timeout_sec * 3)
        load.start()
        time.sleep(2.0)
        with Progress(cluster, load):
            for victim, alive in ((1, [0, 2, 3]), (0, [2, 3])):
                if ha and victim == 0:
                    _ha_second_round(cluster, expect, round_timeout_sec)
                    break
                print(f"\n> killing the executor of rank {victim} (engine status becomes DEAD, its API stays up)")
                cluster.inject(victim, "executor_death")
                t0 = time.monotonic()
                rt = cluster.wait_serving(round_timeout_sec, alive=alive)
                print(f"\n  recovered in {time.monotonic() - t0:.1f}s: phase={rt['phase']} alive={rt['alive_dp_ranks']} "
                      f"dead_committed={rt['dead_committed']}")
                expect(rt["phase"] == "SCALED_DOWN_RUNNING", "phase is SCALED_DOWN_RUNNING")
                expect(rt["alive_dp_ranks"] == alive, f"alive ranks are {alive} (original ids kept)")
                published = cluster.published().get(spec.instance_id, [])
                expect(published == alive, f"coordinator routes to {published}")
                txn = cluster.timeline()[-1]
                print_timeline(txn)
                print_stage_bar(cluster)
                expect(txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded", "round succeeded without fallback")
                applies = [e for e in txn["events"] if e["name"] == "apply"]
                expect(bool(applies) and all(e["outcome"] == "ok" for e in applies), "one accepted apply per pod with survivors")
                time.sleep(1.5)
        load.stop()
        counts = load.counts()
        print(f"\nrequests: sent={counts['sent']} succeeded={counts['succeeded']} failed={counts['failed']}")
        expect(counts["succeeded"] > 0, "requests were served")
        probe = load.send_one("after recovery")
        serving = (cluster.runtime() or {}).get("alive_dp_ranks", [2, 3]) if ha else [2, 3]
        expect(probe.ok and probe.rank in serving, f"inference after recovery served by rank {probe.rank}")
        if ha:
            # A whole-instance reconfiguration restarts every engine: requests it cut are reported, not expected zero.
            print(f"  (requests cut by the reconfiguration after the takeover: {counts['failed']})")
        else:
            expect(counts["failed"] == 0, "no request lost during the scale-downs")
        if keep:
            keep_up(cluster, failures)
    except Terminated:
        print("\nmotor demo: SIGTERM received", flush=True)
        raise
    except Exception as exc:  # noqa: BLE001 - the demo reports and fails, it never hangs
        failures.append(f"{type(exc).__name__}: {exc}")
        print(f"\nmotor demo: {type(exc).__name__}: {exc}")
    finally:
        with sigterm_deferred():  # a second SIGTERM must not cut the teardown short
            if load is not None:
                load.stop(timeout_sec=10)
            print("\nmotor demo: stopping every process")
            cluster.stop()
    if failures:
        print(f"motor demo: FAILED ({len(failures)}): " + "; ".join(failures))
        return 1
    print("motor demo: all expectations held")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="motor", description="Motor command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the local-cluster scale-down demo")
    demo.add_argument("--run-dir", type=Path, default=None, help="where logs go (default runs/demo-<time>)")
    demo.add_argument("--round-timeout-sec", type=float, default=60.0)
    demo.add_argument("--tls", action="store_true", help="mTLS and roles on every contract (development certificates)")
    demo.add_argument("--ha", action="store_true",
                      help="two Controller replicas on a local etcd; the leader is killed in the middle of round 2")
    demo.add_argument("--keep", action="store_true",
                      help="keep the cluster up after the rounds (watch it in the operator console) until Ctrl-C")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_dir = args.run_dir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
        with exit_on_sigterm():
            return run_demo(run_dir.resolve(), args.round_timeout_sec, tls=args.tls, ha=args.ha, keep=args.keep)
    return 2


if __name__ == "__main__":
    sys.exit(main())
