"""Memory per open stream and per held request: the Coordinator against vllm-router holding N
streaming completions open on the same engines, side by side in one run.

    .venv/bin/python -m benchmarks.stream_memory [--streams 1000] [--per-token-latency-sec 0.5] [--held] [--json out.json]

The engines are `benchmarks.router`'s backends (light fake engines in one process) with a slow token
rate, so every stream stays open while it is measured. For each router: its resident set (RSS, and
USS: the pages only it holds) before any request, then with N streams open (each has received its
first token), then after they all ended; the growth divided by N is the memory per open stream.
Target printed beside it (never asserted): ≤ 64 KiB per open stream.

With --held, the same for N requests *held*: the Coordinator and Motor's vllm-router (the one whose
workers Motor's publisher adds) start with nothing published, as while no instance is publishable;
once every request is connected (counted on the router's listening port) the memory is read, then
the instance is published and every request must complete (the Coordinator holds them for
`hold_when_unavailable_sec`, vllm-router in its retry budget).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks.router import MOTOR_ROUTER, Backends

TARGET_KIB_PER_STREAM = 64.0
# Every stream is held open this long at most (a bound on the run, not a measurement).
HOLD_LIMIT_SEC = 120.0


def _memory(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"rss_kib": info.rss / 1024, "uss_kib": info.uss / 1024}


async def _open_streams(url: str, streams: int, max_tokens: int, measure: Callable[[], dict]) -> dict:
    """N streaming completions at once; once each has its first token (or failed), `measure()`; then
    the rest of every stream is read to its end."""
    settled, all_settled = 0, asyncio.Event()
    failures: list[str] = []
    body = {"model": "motor-sim", "prompt": "memory", "max_tokens": max_tokens, "stream": True}

    def settle() -> None:
        nonlocal settled
        settled += 1
        if settled == streams:
            all_settled.set()

    async def one(session: aiohttp.ClientSession) -> None:
        open_ = False
        try:
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                if resp.status != 200:
                    failures.append(f"HTTP {resp.status}")
                    return
                async for _line in resp.content:
                    if not open_:
                        open_ = True
                        settle()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            if not open_:
                settle()

    timeout = aiohttp.ClientTimeout(total=HOLD_LIMIT_SEC)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks = [asyncio.create_task(one(session)) for _ in range(streams)]
        await asyncio.wait_for(all_settled.wait(), HOLD_LIMIT_SEC)
        during = measure()
        await asyncio.gather(*tasks)
    return {"during": during, "failed": len(failures), "failures": failures[:5]}


def _connected(pid: int, port: int) -> int:
    """Established connections the process accepted on its listening `port`."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port)


async def _hold_then_release(url: str, pid: int, streams: int, max_tokens: int,
                             release: Callable[[], None]) -> dict:
    """N streaming completions to a router with nothing to route to; once all N are connected,
    the memory is read and `release()` publishes the instance; every request must then complete."""
    port = int(url.rsplit(":", 1)[1])
    body = {"model": "motor-sim", "prompt": "held", "max_tokens": max_tokens, "stream": True}
    failures: list[str] = []

    async def one(session: aiohttp.ClientSession) -> None:
        try:
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                text = await resp.read()
                if resp.status != 200 or b"[DONE]" not in text:
                    failures.append(f"HTTP {resp.status}: {text[:120]!r}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")

    timeout = aiohttp.ClientTimeout(total=HOLD_LIMIT_SEC)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks = [asyncio.create_task(one(session)) for _ in range(streams)]
        deadline = time.monotonic() + HOLD_LIMIT_SEC
        while (connected := _connected(pid, port)) < streams and not failures:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {connected} of {streams} requests connected to {url} "
                                   f"within {HOLD_LIMIT_SEC:g} s")
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the last connections' requests read and parked
        held = _memory(pid)
        await asyncio.to_thread(release)
        await asyncio.gather(*tasks)
    return {"during": held, "failed": len(failures), "failures": failures[:5]}


def measure(name: str, pid: int, streams: int, load: Callable[[], Coroutine[Any, Any, dict]]) -> dict:
    """The router's memory before, during `load()` (its "during" reading) and a second after it."""
    time.sleep(1.0)
    before = _memory(pid)
    run = asyncio.run(load())
    time.sleep(1.0)
    after = _memory(pid)
    during = run["during"]
    return {
        "target": name, "streams": streams, "failed": run["failed"], "failures": run["failures"],
        "before": before, "during": during, "after": after,
        "rss_kib_per_stream": (during["rss_kib"] - before["rss_kib"]) / streams,
        "uss_kib_per_stream": (during["uss_kib"] - before["uss_kib"]) / streams,
        "rss_kib_kept_after": after["rss_kib"] - before["rss_kib"],
    }


def render(rows: list[dict], held: bool) -> str:
    what = "request" if held else "stream"
    out = [f"{'router':<28} {'held' if held else 'streams':>7} {'failed':>6} {'RSS before':>11} {'RSS during':>11} "
           f"{f'RSS KiB/{what}':>15} {f'USS KiB/{what}':>15} {'kept after':>10}  target"]
    for r in rows:
        out.append(f"{r['target']:<28} {r['streams']:>7} {r['failed']:>6} {r['before']['rss_kib']:>9.0f} K "
                   f"{r['during']['rss_kib']:>9.0f} K {r['rss_kib_per_stream']:>15.1f} {r['uss_kib_per_stream']:>15.1f} "
                   f"{r['rss_kib_kept_after']:>8.0f} K  " + ("-" if held else f"≤ {TARGET_KIB_PER_STREAM:g} KiB/stream"))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--per-token-latency-sec", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=40, help="tokens per stream (the stream's length)")
    parser.add_argument("--dp", type=int, default=4)
    parser.add_argument("--no-router", action="store_true", help="the Coordinator only")
    parser.add_argument("--held", action="store_true",
                        help="requests held while nothing is published, instead of open streams")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args(argv)
    if args.streams < 1:
        parser.error(f"--streams must be at least 1, got {args.streams}")
    if args.max_tokens * args.per_token_latency_sec >= HOLD_LIMIT_SEC:
        parser.error(f"--max-tokens × --per-token-latency-sec must stay under {HOLD_LIMIT_SEC:g} s, "
                     f"got {args.max_tokens * args.per_token_latency_sec:g} s")
    work = Path(tempfile.mkdtemp(prefix="motor-stream-memory-"))
    backends = Backends(work, args.dp, args.per_token_latency_sec, variants=False)
    rows: list[dict] = []
    try:
        if args.held:
            backends.start(with_router=not args.no_router, with_motor_router=True, publish=False)
            names = ("motor-coordinator", MOTOR_ROUTER)
        else:
            backends.start(with_router=not args.no_router, with_motor_router=False)
            names = ("motor-coordinator", "vllm-router")
        for name in [n for n in names if n in backends.urls]:
            print(f"{name}: {args.streams} {'held requests' if args.held else 'streams'} of {args.max_tokens} "
                  f"tokens, {args.per_token_latency_sec:g} s apart", flush=True)
            url, pid = backends.urls[name][0], backends.procs[name].pid
            if args.held:
                load = partial(_hold_then_release, url, pid, args.streams, args.max_tokens,
                               partial(backends.publish, name))
            else:
                load = partial(_open_streams, url, args.streams, args.max_tokens, partial(_memory, pid))
            rows.append(measure(name, pid, args.streams, load))
    finally:
        backends.stop()
    load = os.getloadavg()
    print(f"\n{time.strftime('%Y-%m-%d')} {platform.node()} {os.cpu_count()} CPUs, load average {load[0]:.1f}")
    print(render(rows, args.held))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load_average": load, "argv": sys.argv[1:], "held": args.held,
                                         "target_kib_per_stream": TARGET_KIB_PER_STREAM}, indent=2))
    return 0 if all(r["failed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
