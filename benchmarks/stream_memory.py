"""Memory per open stream: the Coordinator against vllm-router holding N streaming completions open
on the same engines, side by side in one run.

    .venv/bin/python -m benchmarks.stream_memory [--streams 1000] [--per-token-latency-sec 0.5] [--json out.json]

The engines are `benchmarks.router`'s backends (light fake engines in one process) with a slow token
rate, so every stream stays open while it is measured. For each router: its resident set (RSS, and
USS: the pages only it holds) before any request, then with N streams open (each has received its
first token), then after they all ended; the growth divided by N is the memory per open stream.
Target printed beside it (never asserted): ≤ 64 KiB per open stream.
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
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import psutil

from benchmarks.router import Backends

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


def measure_router(name: str, url: str, pid: int, streams: int, max_tokens: int) -> dict:
    time.sleep(1.0)
    before = _memory(pid)
    run = asyncio.run(_open_streams(url, streams, max_tokens, lambda: _memory(pid)))
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


def render(rows: list[dict]) -> str:
    out = [f"{'router':<28} {'streams':>7} {'failed':>6} {'RSS before':>11} {'RSS during':>11} "
           f"{'RSS KiB/stream':>14} {'USS KiB/stream':>14} {'kept after':>10}  target"]
    for r in rows:
        out.append(f"{r['target']:<28} {r['streams']:>7} {r['failed']:>6} {r['before']['rss_kib']:>9.0f} K "
                   f"{r['during']['rss_kib']:>9.0f} K {r['rss_kib_per_stream']:>14.1f} {r['uss_kib_per_stream']:>14.1f} "
                   f"{r['rss_kib_kept_after']:>8.0f} K  ≤ {TARGET_KIB_PER_STREAM:g} KiB/stream")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--per-token-latency-sec", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=40, help="tokens per stream (the stream's length)")
    parser.add_argument("--dp", type=int, default=4)
    parser.add_argument("--no-router", action="store_true", help="the Coordinator only")
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
        backends.start(with_router=not args.no_router, with_motor_router=False)
        for name in [n for n in ("motor-coordinator", "vllm-router") if n in backends.urls]:
            print(f"{name}: {args.streams} streams of {args.max_tokens} tokens, "
                  f"{args.per_token_latency_sec:g} s apart", flush=True)
            rows.append(measure_router(name, backends.urls[name][0], backends.procs[name].pid, args.streams,
                                       args.max_tokens))
    finally:
        backends.stop()
    load = os.getloadavg()
    print(f"\n{time.strftime('%Y-%m-%d')} {platform.node()} {os.cpu_count()} CPUs, load average {load[0]:.1f}")
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load_average": load, "argv": sys.argv[1:],
                                         "target_kib_per_stream": TARGET_KIB_PER_STREAM}, indent=2))
    return 0 if all(r["failed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
