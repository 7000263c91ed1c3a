"""Heartbeat load: one Controller leader under a whole fleet's heartbeats, without the fleet.

    .venv/bin/python -m benchmarks.heartbeat_load [--instances 64] [--dp 256] [--heartbeat-hz 1]
                                                  [--quiet-intervals default,0]
                                                  [--transports stream,unary] [--senders 1] [--watchers 4]
                                                  [--window-sec 30] [--json out.json]

A real Controller and Coordinator (`motor-controller`, `motor-coordinator`, `benchmarks.scale`'s
fleet settings: in-memory store, the services' default timings, a heartbeat period of
1 / --heartbeat-hz) and, in place of the NodeManagers, a load generator: it registers every pod of
--instances × --dp endpoints (8 ranks per pod) with the fields a NodeManager sends (`Register`),
then heartbeats each pod as an idle NodeManager does (`nodemanager.controller_link`; nothing changes
in the pods): every period when the Controller hands down no quiet interval at registration, else
once per quiet interval, the pods spread evenly over that time, over grpc.aio from --senders
processes, through the NodeManager's own client code. Each pod's heartbeats are messages of its
HeartbeatStream (`nodemanager.heartbeat_stream`, as NodeManagers send them), or unary Heartbeat
calls (what they send to an older Controller). The fleet runs once per transport and quiet interval
(--quiet-intervals: the Controller's heartbeat_quiet_interval_sec, its own default or seconds), a
fresh Controller each time, so one run prints the quiet fleet beside the one that heartbeats every
period. No engine exists and nothing faults, so the Controller does what a quiet fleet of that size
makes it do. `benchmarks.scale` runs the real NodeManagers instead, which on a
small machine starve long before the Controller does (2,048 of them do not fit two cores).

Measured over --window-sec after --warmup-sec: the Controller's CPU (% of one core, schedstat), its
RSS, the heartbeats it answered per second, heartbeat latency (p50 / p95 / p99, as the generator saw
it), the status API's latency (the JSON page of every instance, of one instance, gRPC
GetFaultToleranceStatus, and the first snapshot of every instance from a WatchFaultToleranceStatus
opened anew each second, while --watchers others stay open) and how many instances serve. The
generator may fall short of the rate the pods are due to send on a small machine; the rate reached is
printed, and the CPU per heartbeat (all the Controller's CPU in the window divided by the heartbeats
it answered: an upper bound) is what extrapolates. Targets printed beside the numbers (never asserted): Controller ≤ 25 % of one core at
16,384 endpoints and 1 Hz, heartbeat p95 ≤ 10 ms, status API p50 ≤ 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import psutil

from benchmarks.scale import fleet_spec
from benchmarks.status_probes import Probes
from benchmarks.timing import cpu_sec_precise, distribution
from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from motor.common.leader_client import LeaderFollowingClient
from motor.common.process import ManagedProcess, start_process
from motor.launch import render
from motor.launch.shutdown import exit_on_sigterm
from motor.launch.spec import ClusterSpec
from nodemanager.heartbeat_stream import HeartbeatStream

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
TARGET_CPU_PCT = 25.0
TARGET_HEARTBEAT_P95_MS = 10.0
TARGET_STATUS_P50_MS = 20.0
# Register calls in flight at once per sender (a fleet's NodeManagers start together).
REGISTER_CONCURRENCY = 64
NM_PORT = 50051
TRANSPORTS = ("stream", "unary")


def register_request(spec: ClusterSpec, iid: int, pod: int) -> controller_pb2.RegisterRequest:
    """What a NodeManager of the fleet sends (nodemanager.agent.register_request, same fields)."""
    ip, ranks = spec.pod_ip(iid, pod), spec.pod_ranks(pod)
    endpoints = [common_pb2.Endpoint(id=r, ip=ip, business_port=18000 + r % spec.ranks_per_pod,
                                     mgmt_port=18000 + r % spec.ranks_per_pod,
                                     device_infos=[common_pb2.DeviceInfo(**d) for d in render.device_infos(spec, r)])
                 for r in ranks]
    return controller_pb2.RegisterRequest(
        pod=common_pb2.Pod(pod_ip=ip, node_name=f"node-{ip}", node_manager_address=f"{ip}:{NM_PORT}",
                           endpoint_ids=ranks),
        instance_id=iid, role=common_pb2.ROLE_UNION, model=spec.model, dp_size=spec.dp_size,
        endpoints=endpoints, ft_capability=common_pb2.FtCapability(**render.ft_capability(spec)))


async def _send(address: str, pods: list[tuple[int, int]], spec: ClusterSpec, hz: float, run_sec: float,
                ready: Path, transport: str) -> dict[str, Any]:
    """Registers `pods`, says so in `ready`, then heartbeats each for `run_sec` over `transport` as an idle
    NodeManager does (nodemanager.controller_link): every 1 / `hz` seconds, or once per quiet interval
    when the Controller hands one down at registration. The pods share one channel (one
    leader-following client); each has a stream of its own."""
    lat_ms: list[tuple[float, float]] = []  # (sent at, latency)
    errors: list[str] = []
    client = LeaderFollowingClient([address], timeout_sec=10.0, label="heartbeat load")
    streams = {pod: HeartbeatStream(client, label=f"heartbeat load pod {pod}") for pod in pods}
    try:
        gate = asyncio.Semaphore(REGISTER_CONCURRENCY)

        quiet_sec: set[float] = set()

        async def register(iid: int, pod: int) -> None:
            async with gate:
                resp = await client.stub(address).Register(register_request(spec, iid, pod), timeout=60)
                if not resp.accepted:
                    raise RuntimeError(f"instance {iid} pod {pod} refused: {resp.message}")
                quiet_sec.add(resp.config.heartbeat_quiet_interval_sec)

        await asyncio.gather(*(register(iid, pod) for iid, pod in pods))
        ready.write_text(json.dumps({"pods": len(pods)}))
        period = max(1.0 / hz, *quiet_sec)
        seq = 0
        tasks: set[asyncio.Task[None]] = set()

        async def beat(iid: int, pod: int, n: int) -> None:
            request = controller_pb2.HeartbeatRequest(
                pod_ip=spec.pod_ip(iid, pod), instance_id=iid, alive_endpoint_ids=spec.pod_ranks(pod), seq=n)
            t = time.perf_counter()
            try:
                if transport == "stream":
                    await streams[(iid, pod)].heartbeat(request)
                else:
                    await client.call("Heartbeat", request)
                lat_ms.append((time.time(), 1000 * (time.perf_counter() - t)))
            except (grpc.aio.AioRpcError, TimeoutError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        start = time.perf_counter()
        while time.perf_counter() - start < run_sec:
            seq += 1
            tick = start + (seq - 1) * period
            for i, (iid, pod) in enumerate(pods):
                due = tick + period * i / len(pods)
                if (wait := due - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                task = asyncio.create_task(beat(iid, pod, seq))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
    finally:
        for stream in streams.values():
            stream.close()
        await client.close()
    fallbacks = sum(s.unary_fallbacks for s in streams.values())
    return {"heartbeats": lat_ms, "errors": len(errors), "error_samples": errors[:5], "unary_fallbacks": fallbacks,
            "quiet_interval_sec": sorted(quiet_sec)}


def sender_main(argv: list[str]) -> int:
    address, spec_doc, pods, hz, run_sec, ready, out, transport = (
        argv[0], json.loads(argv[1]), json.loads(argv[2]), float(argv[3]), float(argv[4]), Path(argv[5]),
        Path(argv[6]), argv[7])
    spec = fleet_spec(**spec_doc)
    out.write_text(json.dumps(asyncio.run(_send(address, [tuple(p) for p in pods], spec, hz, run_sec, ready,
                                                transport))))
    return 0


def _serving(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        resp = controller_pb2_grpc.ControllerStub(channel).GetFaultToleranceStatus(
            controller_pb2.GetFaultToleranceStatusRequest(), timeout=60)
    return sum(1 for rt in resp.instances if rt.serving_published)


def _service(name: str, script: str, config: dict[str, Any], work: Path) -> tuple[ManagedProcess, dict[str, Any]]:
    cfg, ready = work / f"{name}.config.json", work / f"{name}.ready.json"
    cfg.write_text(json.dumps(config))
    proc = start_process([str(BIN / script), "--config", str(cfg), "--ready-file", str(ready)],
                         log_path=work / f"{name}.log", name=name)
    return proc, proc.wait_ready_file(ready, 60, required_keys=["grpc_port", "http_port"])


def run(args: argparse.Namespace, work: Path, transport: str, quiet: str) -> dict[str, Any]:
    """One fleet: `quiet` is the Controller's heartbeat_quiet_interval_sec, or "default" (its own)."""
    spec_doc = {"instances": args.instances, "dp_size": args.dp}
    spec = fleet_spec(**spec_doc)
    coord, cinfo = _service("coordinator", "motor-coordinator", render.coordinator_config(spec), work)
    procs = [coord]
    try:
        config = render.controller_config(spec, 0, coordinator_address=f"127.0.0.1:{cinfo['grpc_port']}",
                                          store_endpoints=[], store_key_prefix="/motor-heartbeat-load")
        config["heartbeat_interval_sec"] = 1.0 / args.heartbeat_hz
        if quiet != "default":
            config["heartbeat_quiet_interval_sec"] = float(quiet)
        ctl, info = _service("controller", "motor-controller", config, work)
        procs.append(ctl)
        address, http = f"127.0.0.1:{info['grpc_port']}", f"http://127.0.0.1:{info['http_port']}"
        pods = [(p.instance_id, p.index) for p in spec.all_pods()]
        run_sec = args.warmup_sec + args.window_sec + 5.0
        senders = []
        for n in range(args.senders):
            mine = pods[n::args.senders]
            ready, out = work / f"sender-{n}.ready.json", work / f"sender-{n}.json"
            senders.append((start_process(
                [sys.executable, "-m", "benchmarks.heartbeat_load", "--sender", address, json.dumps(spec_doc),
                 json.dumps(mine), str(args.heartbeat_hz), str(run_sec), str(ready), str(out), transport],
                log_path=work / f"sender-{n}.log", name=f"sender-{n}", cwd=ROOT), ready, out))
            procs.append(senders[-1][0])
        t0 = time.monotonic()
        for proc, ready, _ in senders:
            proc.wait_ready_file(ready, 600, required_keys=["pods"])
        registered_sec = time.monotonic() - t0
        print(f"{len(pods)} pods registered in {registered_sec:.1f} s; warming up {args.warmup_sec:g} s", flush=True)
        time.sleep(args.warmup_sec)
        pid = ctl.pid
        cpu0, wall0, since = cpu_sec_precise(pid), time.monotonic(), time.time()
        probes = Probes(address, http, spec, heartbeat_hz=0, watchers=args.watchers).start()
        time.sleep(args.window_sec)
        probes.stop()
        cpu1, wall1, until = cpu_sec_precise(pid), time.monotonic(), time.time()
        rss_mib = psutil.Process(pid).memory_info().rss / 2**20
        serving = _serving(address)
        beats: list[tuple[float, float]] = []
        errors = fallbacks = 0
        quiet_sec: set[float] = set()
        for proc, _, out in senders:
            if proc.wait_exit(run_sec + 120) != 0:
                raise RuntimeError(f"{proc.name} failed:\n{proc.log_tail()}")
            doc = json.loads(out.read_text())
            beats += [tuple(b) for b in doc["heartbeats"]]
            errors += doc["errors"]
            fallbacks += doc["unary_fallbacks"]
            quiet_sec.update(doc["quiet_interval_sec"])
        in_window = [ms for at, ms in beats if since <= at <= until]
        cpu_pct = 100 * (cpu1 - cpu0) / (wall1 - wall0)
        rate = len(in_window) / (until - since)
        return {
            "transport": transport, "label": f"{transport}, quiet interval {quiet}",
            "quiet_interval_sec": sorted(quiet_sec), "unary_fallbacks": fallbacks, "instances": args.instances,
            "dp": args.dp, "endpoints": args.instances * args.dp, "pods": len(pods),
            "heartbeat_hz_asked": args.heartbeat_hz, "heartbeats_per_sec": rate,
            "heartbeats_per_sec_asked": len(pods) * args.heartbeat_hz,
            "heartbeats_per_sec_due": len(pods) / max([1.0 / args.heartbeat_hz, *quiet_sec]),
            "registered_sec": registered_sec,
            "controller_cpu_pct": cpu_pct, "controller_cpu_ms_per_heartbeat": 10 * cpu_pct / rate if rate else float("nan"),
            "controller_rss_mib": rss_mib, "instances_serving": serving, "heartbeat_errors": errors,
            **probes.summary(), "heartbeat": distribution(in_window),
        }
    finally:
        for proc in reversed(procs):
            proc.stop(grace_sec=10)


def render_report(r: dict[str, Any]) -> str:
    at_full = r["controller_cpu_ms_per_heartbeat"] * r["heartbeats_per_sec_due"] / 10
    saturates = 1000 / r["controller_cpu_ms_per_heartbeat"] if r["controller_cpu_ms_per_heartbeat"] else float("nan")
    hb, one, every, grpc_all = r["heartbeat"], r["status_http_one"], r["status_http_all"], r["status_grpc_all"]
    snap, watch = r["watch_snapshot"], r["watch"]
    return "\n".join([
        f"{r['label']} heartbeats: {r['endpoints']:,} endpoints ({r['instances']} instances × {r['dp']}, "
        f"{r['pods']:,} pods), {r['instances_serving']} instances serving; registered in {r['registered_sec']:.1f} s",
        f"  heartbeats answered {r['heartbeats_per_sec']:.0f}/s of the {r['heartbeats_per_sec_due']:.0f}/s its "
        f"NodeManagers send with nothing changing ({r['heartbeats_per_sec_asked']:.0f}/s at every period), "
        f"{r['heartbeat_errors']} errors, {r['unary_fallbacks']} sent unary after a stream failed",
        f"  Controller CPU {r['controller_cpu_pct']:.1f} % of one core, RSS {r['controller_rss_mib']:.0f} MiB; "
        f"{r['controller_cpu_ms_per_heartbeat']:.3f} ms per heartbeat (all its CPU, the status probes' too: an upper bound)",
        f"  at the rate sent: {at_full:.1f} % of one core (target ≤ {TARGET_CPU_PCT:g} %); one core saturates at "
        f"about {saturates:,.0f} heartbeats/s",
        f"  heartbeat p50/p95/p99 {hb['p50_ms']:.1f}/{hb['p95_ms']:.1f}/{hb['p99_ms']:.1f} ms "
        f"(target p95 ≤ {TARGET_HEARTBEAT_P95_MS:g})",
        f"  status page (all) p50 {every['p50_ms']:.1f} ms, (one) p50 {one['p50_ms']:.1f} ms, GetFaultToleranceStatus "
        f"p50 {grpc_all['p50_ms']:.1f} ms (target p50 ≤ {TARGET_STATUS_P50_MS:g})",
        f"  Watch opened, first snapshot of every instance ({snap['bytes']:,} B) p50/p95 {snap['p50_ms']:.1f}/"
        f"{snap['p95_ms']:.1f} ms (target p50 ≤ {TARGET_STATUS_P50_MS:g}); {watch['watchers']} open watchers got "
        f"{watch['messages']} changes, {watch['errors']} Watch errors",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--sender":
        return sender_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.heartbeat_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--dp", type=int, default=256, help="endpoints per instance (a multiple of 8)")
    parser.add_argument("--heartbeat-hz", type=float, default=1.0)
    parser.add_argument("--transports", default="stream",
                        help=f"comma-separated, run in order: {', '.join(TRANSPORTS)} (default: stream)")
    parser.add_argument("--quiet-intervals", default="default,0",
                        help="the Controller's heartbeat_quiet_interval_sec, one fleet each, comma-separated: "
                             "'default' (its own: a third of the heartbeat timeout) or seconds, 0 a heartbeat "
                             "every period (default: default,0)")
    parser.add_argument("--senders", type=int, default=1, help="load generator processes")
    parser.add_argument("--watchers", type=int, default=4,
                        help="WatchFaultToleranceStatus streams of every instance open through the window")
    parser.add_argument("--window-sec", type=float, default=30.0)
    parser.add_argument("--warmup-sec", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="write every number here, a list of the runs in order")
    args = parser.parse_args(argv)
    for name in ("instances", "senders"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.watchers < 0:
        parser.error(f"--watchers must be 0 or more, got {args.watchers}")
    if args.dp < 8 or args.dp % 8:
        parser.error(f"--dp must be a positive multiple of 8 (8 ranks per pod), got {args.dp}")
    if not 0.1 < args.heartbeat_hz <= 10:
        # The Controller refuses a period not shorter than its heartbeat timeout (10 s).
        parser.error(f"--heartbeat-hz must be in (0.1, 10], got {args.heartbeat_hz}")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or set(transports) - set(TRANSPORTS):
        parser.error(f"--transports takes {', '.join(TRANSPORTS)}, comma-separated; got {args.transports!r}")
    quiets = [q.strip() for q in args.quiet_intervals.split(",") if q.strip()]
    for q in quiets:
        try:
            if q != "default" and not 0 <= float(q) <= 300:
                raise ValueError
        except ValueError:
            parser.error(f"--quiet-intervals takes 'default' or seconds in [0, 300], comma-separated; got {q!r}")
    if not quiets:
        parser.error("--quiet-intervals is empty")
    work = Path(tempfile.mkdtemp(prefix="motor-heartbeat-load-"))
    print(f"heartbeat load: python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; logs under {work}", flush=True)
    results = []
    for n, (transport, quiet) in enumerate(itertools.product(transports, quiets)):
        (work / f"{n}-{transport}-{quiet}").mkdir()
        result = run(args, work / f"{n}-{transport}-{quiet}", transport, quiet)
        result["load_average_end"] = os.getloadavg()
        print(render_report(result), flush=True)
        results.append(result)
    if len(results) > 1:
        base = results[0]
        for other in results[1:]:
            print(f"{base['label']} against {other['label']}: Controller CPU "
                  f"{base['controller_cpu_pct'] / other['controller_cpu_pct']:.2f}×, per heartbeat "
                  f"{base['controller_cpu_ms_per_heartbeat'] / other['controller_cpu_ms_per_heartbeat']:.2f}×, "
                  f"heartbeat p95 {base['heartbeat']['p95_ms'] / other['heartbeat']['p95_ms']:.2f}×")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    with exit_on_sigterm():
        sys.exit(main())
