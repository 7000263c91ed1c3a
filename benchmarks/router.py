"""Router benchmark: the Coordinator's OpenAI front against vllm-router (PyPI, Rust) on the same
engines, side by side in one run.

    .venv/bin/python -m benchmarks.router [--concurrency 1,16,64,256] [--duration-sec 6] [--repeats 2]
                                          [--workloads default,short] [--max-tokens 16] [--short-max-tokens 4]
                                          [--per-token-latency-sec 0.001] [--json out.json]

Backends: one instance of --dp light fake engines (`motor.testing.fake_engine --group`, one helper
process, OpenAI completions with toy tokens --per-token-latency-sec apart). Every target is driven
by the same client (aiohttp, in a process of its own) with N concurrent streaming completions
(`stream: true`) for --duration-sec after a warm-up, once per workload: `default` (--max-tokens
tokens each) and `short` (--short-max-tokens, 4: overhead-bound, where the router's own cost per
request is most of the latency):

* direct: the client spreads its requests over the engines itself (the baseline);
* motor-coordinator: its serving view set by one Refresh ADD (what the Controller publishes), on its
  default event loop (uvloop where installed), again as motor-coordinator-asyncio (`--event-loop
  asyncio`), a second process on the same engines, so the two loops are compared in one run, and
  once more with re-inference off (motor-coordinator-no-migration: no stream tracking) to show what
  it costs;
* vllm-router: `vllm-router --worker-urls <engines> --policy round_robin` (installed into
  .tools/vllm-router-venv by `make test`'s installs, or here on first use);
* motor→vllm-router: a second vllm-router started with no workers, its membership published by
  Motor's own vllm-router publisher (`motor.controller.publishers.vllm_router`, the Controller's
  code path), so what Motor's publication leaves of the Rust router's hot path shows beside it.

Per target and concurrency: completed requests per second, time to first token and whole-request
latency (p50, p99), and the added latency over direct (p50, p99). Targets are rotated for every
repeat (direct, coordinator, router, then the next concurrency) so drifting machine load hits all
three alike; the medians over repeats are reported. Targets printed beside the numbers: Coordinator
throughput ≥ 1.0× vllm-router's at 64 and 256 streams, added p99 latency ≤ 2× vllm-router's.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from benchmarks.plots import PlotError, RunInfo, plot_router, require_matplotlib
from benchmarks.timing import cpu_sec, median, pct
from gen.motor.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from motor.common.config.publication import VllmRouterConfig
from motor.common.ports import free_ports
from motor.common.process import ManagedProcess, start_process
from motor.controller.publishers.vllm_router import VllmRouterPublisher
from motor.controller.router_client import VllmRouterClient
from motor.launch.shutdown import exit_on_sigterm
from motor.testing.vllm_router import HOST, ROUTER_VENV, ROUTER_VERSION, start_router

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MOTOR_ROUTER = "motor→vllm-router"
ENGINE_HOST = "127.0.50.2"
TARGET_THROUGHPUT_RATIO = 1.0
TARGET_THROUGHPUT_STREAMS = (64, 256)
TARGET_ADDED_P99_RATIO = 2.0


def ensure_router(venv: Path = ROUTER_VENV) -> Path:
    """The vllm-router console script, installed into its own venv on first use."""
    exe = venv / "bin" / "vllm-router"
    if exe.exists():
        return exe
    print(f"installing vllm-router=={ROUTER_VERSION} into {venv} (first use)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"vllm-router=={ROUTER_VERSION}"],
                   check=True)
    return exe


def _wait_http(url: str, proc: ManagedProcess, timeout_sec: float, method: str = "GET", body: bytes | None = None) -> None:
    deadline = time.monotonic() + timeout_sec
    while True:
        if proc.returncode is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.returncode}:\n{proc.log_tail()}")
        try:
            req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{url} not 200 within {timeout_sec:g}s; {proc.name} log:\n{proc.log_tail()}")
        time.sleep(0.2)


class Backends:
    def __init__(self, work: Path, dp: int, per_token_latency_sec: float, variants: bool = True) -> None:
        """`variants`: besides the Coordinator on its default loop, the asyncio and no-migration ones."""
        self.work = work
        self.dp = dp
        self.per_token_latency_sec = per_token_latency_sec
        self.procs: dict[str, ManagedProcess] = {}
        self.engine_ports = free_ports(dp, ENGINE_HOST)
        # Coordinator processes by target name → (event loop, config).
        base = {"server": {"host": HOST, "port": 0}, "http": {"host": HOST, "port": 0}}
        self.coordinators: dict[str, tuple[str, dict[str, Any]]] = {"motor-coordinator": ("auto", base)}
        if variants and importlib.util.find_spec("uvloop") is not None:
            self.coordinators["motor-coordinator-asyncio"] = ("asyncio", base)
        if variants:
            # What re-inference's stream tracking (every event parsed, for a continuation) costs.
            self.coordinators["motor-coordinator-no-migration"] = ("auto", {**base, "migration": {"enabled": False}})
        self.urls: dict[str, list[str]] = {"direct": self.engine_urls}
        self.grpc_ports: dict[str, int] = {}

    @property
    def engine_urls(self) -> list[str]:
        return [f"http://{ENGINE_HOST}:{p}" for p in self.engine_ports]

    def start(self, with_router: bool, with_motor_router: bool = True, publish: bool = True) -> None:
        """`with_motor_router`: with vllm-router, also the one whose workers Motor's publisher adds.
        `publish=False`: the Coordinators and that router start with nothing to route to (what they
        hold while no instance is publishable) until `publish(name)`."""
        ready = self.work / "engines.ready.json"
        self.procs["engines"] = start_process(
            [sys.executable, "-m", "motor.testing.fake_engine", "--group",
             "--endpoints", ",".join(f"{ENGINE_HOST}:{p}" for p in self.engine_ports),
             "--per-token-latency-sec", str(self.per_token_latency_sec), "--ready-file", str(ready)],
            log_path=self.work / "engines.log", name="engines")
        self.procs["engines"].wait_ready_file(ready, 60, required_keys=["ranks"])
        for name, (loop, config) in self.coordinators.items():
            cfg = self.work / f"{name}.config.json"
            cfg.write_text(json.dumps(config))
            cready = self.work / f"{name}.ready.json"
            coord = self.procs[name] = start_process(
                [str(BIN / "motor-coordinator"), "--config", str(cfg), "--ready-file", str(cready), "--log-level",
                 "INFO", "--event-loop", loop], log_path=self.work / f"{name}.log", name=name)
            info = coord.wait_ready_file(cready, 60, required_keys=["grpc_port", "http_port"])
            self.urls[name] = [f"http://{HOST}:{info['http_port']}"]
            self.grpc_ports[name] = info["grpc_port"]
            if publish:
                self.publish(name)
        if with_router:
            exe = ensure_router()
            body = json.dumps({"model": "motor-sim", "prompt": "warm", "max_tokens": 1}).encode()
            proc, url = start_router(exe, self.work / "vllm-router.log", worker_urls=self.engine_urls)
            self.procs["vllm-router"], self.urls["vllm-router"] = proc, [url]
            if with_motor_router:
                # The same router with no workers on its command line: Motor's publisher adds them.
                proc, url = start_router(exe, self.work / "motor-vllm-router.log")
                self.procs[MOTOR_ROUTER], self.urls[MOTOR_ROUTER] = proc, [url]
                if publish:
                    self.publish(MOTOR_ROUTER)
            # A router with nothing published yet would hold the warm-up request: only the others.
            for name in ["vllm-router", *([MOTOR_ROUTER] if with_motor_router and publish else [])]:
                _wait_http(f"{self.urls[name][0]}/v1/completions", self.procs[name], 120, "POST", body)

    def _view(self) -> common_pb2.Instance:
        inst = common_pb2.Instance(id=1, role=common_pb2.ROLE_UNION, model="motor-sim", dp_size=self.dp)
        for rank, port in enumerate(self.engine_ports):
            inst.endpoints.add(id=rank, ip=ENGINE_HOST, business_port=port)
        return inst

    def publish(self, name: str) -> None:
        """The instance's endpoints to one Coordinator (a Refresh ADD) or to Motor's vllm-router."""
        if name == MOTOR_ROUTER:
            asyncio.run(self._publish_to_router(self.urls[name][0]))
            return
        with grpc.insecure_channel(f"{HOST}:{self.grpc_ports[name]}") as channel:
            coordinator_pb2_grpc.CoordinatorStub(channel).Refresh(
                coordinator_pb2.RefreshRequest(event=coordinator_pb2.REFRESH_EVENT_ADD, instances=[self._view()],
                                               revision=1),
                timeout=10)

    async def _publish_to_router(self, url: str) -> None:
        """One ADD through the Controller's vllm-router publisher (what a round's commit sends)."""
        publisher = VllmRouterPublisher(VllmRouterClient(VllmRouterConfig(url=url, request_timeout_sec=10.0)))
        try:
            await publisher.add(self._view())
        finally:
            await publisher.close()

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop(grace_sec=5)


# ---- the client (runs in a process of its own: python -m benchmarks.router --client ...) --------

async def _client(urls: list[str], concurrency: int, duration_sec: float, warmup_sec: float, max_tokens: int) -> dict:
    import aiohttp

    results: list[tuple[float, float, float, bool]] = []  # start, first token, end, ok
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    counter = 0
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        stop_at = time.perf_counter() + warmup_sec + duration_sec
        measure_from = time.perf_counter() + warmup_sec

        async def worker(n: int) -> None:
            nonlocal counter
            while time.perf_counter() < stop_at:
                counter += 1
                url = urls[counter % len(urls)]
                body = {"model": "motor-sim", "prompt": f"stream {n} {counter}", "max_tokens": max_tokens,
                        "stream": True}
                t0 = time.perf_counter()
                first = 0.0
                ok = False
                try:
                    async with session.post(url + "/v1/completions", json=body) as resp:
                        if resp.status == 200:
                            async for line in resp.content:
                                if not first and line.startswith(b"data: {"):
                                    first = time.perf_counter()
                                if line.startswith(b"data: [DONE]"):
                                    ok = True
                        else:
                            await resp.read()
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                t1 = time.perf_counter()
                if t0 >= measure_from:
                    results.append((t0, first or t1, t1, ok))

        await asyncio.gather(*(worker(n) for n in range(concurrency)))
    done = [r for r in results if r[3]]
    window = (max(r[2] for r in done) - min(r[0] for r in done)) if done else float("nan")
    return {"requests": len(results), "ok": len(done), "failed": len(results) - len(done),
            "throughput_rps": len(done) / window if done else 0.0,
            "latency_ms": [1000 * (r[2] - r[0]) for r in done], "ttft_ms": [1000 * (r[1] - r[0]) for r in done]}


def run_client(urls: list[str], concurrency: int, duration_sec: float, warmup_sec: float, max_tokens: int,
               work: Path) -> dict[str, Any]:
    out = work / f"client-{random.getrandbits(32):08x}.json"
    subprocess.run([sys.executable, "-m", "benchmarks.router", "--client", json.dumps(urls), str(concurrency),
                    str(duration_sec), str(warmup_sec), str(max_tokens), str(out)], check=True, cwd=ROOT)
    doc = json.loads(out.read_text())
    out.unlink()
    return doc


# ---- the run -----------------------------------------------------------------------------------

def measure(backends: Backends, targets: list[str], concurrencies: list[int], repeats: int, duration_sec: float,
            warmup_sec: float, max_tokens: int) -> dict[str, Any]:
    urls = backends.urls
    pids = {name: proc.pid for name, proc in backends.procs.items() if name != "engines"}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {t: {str(c): [] for c in concurrencies} for t in targets}
    for rep in range(repeats):
        for c in concurrencies:
            order = targets[rep % len(targets):] + targets[:rep % len(targets)]
            for target in order:
                cpu0 = cpu_sec(pids[target]) if target in pids else 0.0
                t0 = time.monotonic()
                r = run_client(urls[target], c, duration_sec, warmup_sec, max_tokens, backends.work)
                r["proxy_cpu_pct"] = (100 * (cpu_sec(pids[target]) - cpu0) / (time.monotonic() - t0)
                                      if target in pids else 0.0)
                raw[target][str(c)].append(r)
                print(f"  repeat {rep + 1}/{repeats} {target:<30} {c:>3} streams: {r['throughput_rps']:7.1f} req/s, "
                      f"p50 {pct(r['latency_ms'], 0.5):6.1f} ms, p99 {pct(r['latency_ms'], 0.99):6.1f} ms, "
                      f"failed {r['failed']}", flush=True)
    summary: dict[str, Any] = {}
    for target in targets:
        summary[target] = {}
        for c in concurrencies:
            runs = raw[target][str(c)]
            summary[target][str(c)] = {
                "throughput_rps": median(r["throughput_rps"] for r in runs),
                "latency_p50_ms": median(pct(r["latency_ms"], 0.5) for r in runs),
                "latency_p99_ms": median(pct(r["latency_ms"], 0.99) for r in runs),
                "ttft_p50_ms": median(pct(r["ttft_ms"], 0.5) for r in runs),
                "ttft_p99_ms": median(pct(r["ttft_ms"], 0.99) for r in runs),
                "failed": sum(r["failed"] for r in runs),
                "requests": sum(r["ok"] for r in runs),
                "proxy_cpu_pct": median(r["proxy_cpu_pct"] for r in runs),
            }
    for target in targets:
        for c in concurrencies:
            row, base = summary[target][str(c)], summary["direct"][str(c)]
            row["added_p50_ms"] = row["latency_p50_ms"] - base["latency_p50_ms"]
            row["added_p99_ms"] = row["latency_p99_ms"] - base["latency_p99_ms"]
            row["added_ttft_p50_ms"] = row["ttft_p50_ms"] - base["ttft_p50_ms"]
    # Each run keeps its latency samples (to 10 µs) for the charts; TTFT is summarized only.
    return {"summary": summary, "raw": {t: {c: [{**{k: v for k, v in r.items() if not k.endswith("_ms")},
                                                 "latency_ms": [round(v, 2) for v in r["latency_ms"]]}
                                                for r in runs] for c, runs in byc.items()} for t, byc in raw.items()}}


def render(summary: dict[str, Any], concurrencies: list[int], workload: str, max_tokens: int) -> str:
    lines = ["", f"Workload {workload}: streaming completions of {max_tokens} tokens through each router; medians over "
             "repeats",
             f"  {'target':<30} {'streams':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'TTFT p50':>9} "
             f"{'added p50':>10} {'added p99':>10} {'proxy CPU %':>12} {'failed':>7}"]
    for c in concurrencies:
        for target, rows in summary.items():
            r = rows[str(c)]
            lines.append(f"  {target:<30} {c:>7} {r['throughput_rps']:>8.1f} {r['latency_p50_ms']:>8.2f} "
                         f"{r['latency_p99_ms']:>8.2f} {r['ttft_p50_ms']:>9.2f} {r['added_p50_ms']:>10.2f} "
                         f"{r['added_p99_ms']:>10.2f} {r['proxy_cpu_pct']:>12.0f} {r['failed']:>7}")
    if "vllm-router" in summary:
        for name in (t for t in summary if t.startswith("motor")):
            at = " and ".join(str(c) for c in TARGET_THROUGHPUT_STREAMS)
            targets = (f" (targets: throughput ≥ {TARGET_THROUGHPUT_RATIO:g}x at {at} streams, added p99 ≤ "
                       f"{TARGET_ADDED_P99_RATIO:g}x)" if name.startswith("motor-coordinator") else "")
            lines.append(f"  {name} against vllm-router{targets}:")
            for c in concurrencies:
                m, v = summary[name][str(c)], summary["vllm-router"][str(c)]
                ratio = m["throughput_rps"] / v["throughput_rps"] if v["throughput_rps"] else float("nan")
                parts = [f"    {c:>3} streams: throughput {ratio:.2f}x"]
                for q in ("p50", "p99"):
                    mine, theirs = m[f"added_{q}_ms"], v[f"added_{q}_ms"]
                    # An added latency at or below 0 (direct as slow as proxied: noise) has no ratio.
                    times = f"{mine / theirs:.2f}x" if theirs > 0 and mine > 0 else "no ratio: at or below direct"
                    parts.append(f"added {q} {mine:.2f} ms vs {theirs:.2f} ms ({times})")
                lines.append(", ".join(parts))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--client":
        urls, c, d, w, mt, out = json.loads(argv[1]), int(argv[2]), float(argv[3]), float(argv[4]), int(argv[5]), argv[6]
        Path(out).write_text(json.dumps(asyncio.run(_client(urls, c, d, w, mt))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--duration-sec", type=float, default=6.0)
    parser.add_argument("--warmup-sec", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workloads", default="default,short",
                        help="default (--max-tokens per request) and/or short (--short-max-tokens: overhead-bound)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--short-max-tokens", type=int, default=4)
    parser.add_argument("--dp", type=int, default=4)
    parser.add_argument("--per-token-latency-sec", type=float, default=0.001)
    parser.add_argument("--no-router", action="store_true", help="skip vllm-router (Coordinator against direct only)")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the charts here (PNG; the bench extra)")
    args = parser.parse_args(argv)
    if args.plot:
        try:
            require_matplotlib()
        except PlotError as exc:
            parser.error(f"--plot {args.plot}: {exc}")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="motor-router-"))
    work.mkdir(parents=True, exist_ok=True)
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    tokens = {"default": args.max_tokens, "short": args.short_max_tokens}
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in tokens]
    if unknown or not workloads:
        parser.error(f"--workloads {args.workloads!r}: expected a comma-separated subset of {', '.join(tokens)}")
    load0 = os.getloadavg()
    print(f"router benchmark: python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load0[0]:.1f}; "
          f"logs under {work}", flush=True)
    started = time.monotonic()
    backends = Backends(work, args.dp, args.per_token_latency_sec)
    targets = ["direct", *backends.coordinators] + ([] if args.no_router else ["vllm-router", MOTOR_ROUTER])
    results: dict[str, Any] = {}
    try:
        backends.start(with_router=not args.no_router)
        for workload in workloads:
            print(f"workload {workload} ({tokens[workload]} tokens per request)", flush=True)
            results[workload] = measure(backends, targets, concurrencies, args.repeats, args.duration_sec,
                                        args.warmup_sec, tokens[workload])
    finally:
        backends.stop()
    for workload in workloads:
        print(render(results[workload]["summary"], concurrencies, workload, tokens[workload]))
    load = os.getloadavg()
    print(f"\n(total run time {time.monotonic() - started:.0f} s; load average at the start {load0[0]:.1f}, at the "
          f"end {load[0]:.1f} on {os.cpu_count()} CPUs: other work on the machine shows here)")
    doc = {"workloads": results, "argv": sys.argv[1:], "max_tokens": {w: tokens[w] for w in workloads},
           "per_token_latency_sec": args.per_token_latency_sec, "load_average": {"start": load0, "end": load},
           "run": RunInfo.here(load0[0]).as_dict()}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        for path in plot_router(doc, args.plot, RunInfo.of(doc, RunInfo.here())):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    with exit_on_sigterm():
        sys.exit(main())
