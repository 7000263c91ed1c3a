"""Benchmark of the reference engine: start-up, fault detection and scale-down rebuild.

Each round starts a fresh 4-rank group (ranks on 127.0.0.1..4, as four pods), keeps a stream
running on rank 0, kills rank 1's executor and measures:

* start-up: launching the 4 processes until every one has written its ready file;
* detection: the executor-death injection until every survivor reports ``unhealthy``
  (first survivor shown too);
* rebuild: the first ``scale_down`` POST until every survivor is ``healthy`` without ft_state.

Run from the repository root: ``.venv/bin/python -m benchmarks.engine_sim [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from motor.common.ports import free_port
from motor.sim.client import SimClient
from motor.sim.cluster import SimCluster

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
SURVIVORS = [0, 2, 3]
POLL_SEC = 0.005
BOUND_SEC = 60.0


def _poll_until(pred, what: str) -> float:
    """Seconds until ``pred()`` holds, polling fast; bounded by BOUND_SEC."""
    started = time.monotonic()
    while time.monotonic() - started < BOUND_SEC:
        if pred():
            return time.monotonic() - started
        time.sleep(POLL_SEC)
    raise TimeoutError(f"{what} not reached within {BOUND_SEC:g}s")


def one_round(run_dir: Path, round_no: int, latency_sec: float, zygote: bool = True) -> dict[str, float]:
    cluster = SimCluster.start(
        run_dir / f"round{round_no}", 4, hosts=HOSTS, ready_timeout_sec=120, zygote=zygote,
        extra_args=["--enable-fault-tolerance", "--enable-fault-injection",
                    "--num-experts", "8", "--num-redundant-experts", "8",
                    "--per-token-latency-sec", str(latency_sec), "--collective-timeout-sec", "30",
                    "--engine-recovery-timeout-sec", "60",
                    # The RFC's status entries (last_ft_request_id tells the rebuild's end), no diagnosing
                    # phase: detection is the engine's own, not vLLM's 1.5 s mask query.
                    "--ft-dialect", "rfc", "--diagnosing-sec", "0"],
    )
    try:
        clients = [SimClient(r.url, timeout_sec=10) for r in cluster.ranks]
        stream_done = threading.Event()

        stream_result: list[object] = []

        def keep_streaming() -> None:
            try:
                stream_result.append(clients[0].stream("/v1/completions", {"prompt": "bench", "max_tokens": 8000},
                                                       timeout_sec=BOUND_SEC))
            finally:
                stream_done.set()

        streamer = threading.Thread(target=keep_streaming, daemon=True)
        streamer.start()
        def in_flight() -> bool:
            if stream_done.is_set():
                raise RuntimeError(f"background stream ended early: {stream_result}")
            return clients[0].admin_state()["in_flight_requests"] == 1

        _poll_until(in_flight, "stream in flight")
        time.sleep(0.2)

        first_unhealthy: list[float] = []
        t0 = time.monotonic()
        clients[1].inject("executor_death")

        def all_unhealthy() -> bool:
            states = [clients[r].entry()["status"] for r in SURVIVORS]
            if not first_unhealthy and "unhealthy" in states:
                first_unhealthy.append(time.monotonic() - t0)
            return all(s == "unhealthy" for s in states)

        _poll_until(all_unhealthy, "survivors unhealthy")
        detect_all = time.monotonic() - t0
        stream_done.wait(10)

        rid = f"bench-{round_no}"
        port = free_port(HOSTS[0])
        t1 = time.monotonic()
        posters = [threading.Thread(target=clients[r].scale_down, args=(rid, [1], HOSTS[0], port)) for r in SURVIVORS]
        for p in posters:
            p.start()
        for p in posters:
            p.join(10)

        def all_healthy() -> bool:
            entries = [clients[r].entry() for r in SURVIVORS]
            failed = [e for e in entries if e.get("ft_state") == "failed"]
            if failed:
                raise RuntimeError(f"scale_down failed: {failed}")
            return all(e["status"] == "healthy" and "ft_state" not in e and e.get("last_ft_request_id") == rid
                       for e in entries)

        _poll_until(all_healthy, "survivors healthy")
        rebuild = time.monotonic() - t1
        for r in SURVIVORS:
            res = clients[r].complete("after", 2)
            if res.status != 200:
                raise RuntimeError(f"rank {r} does not serve after rebuild: {res.status} {res.body}")
        return {"startup_sec": cluster.startup_sec, "detect_first_sec": first_unhealthy[0],
                "detect_all_sec": detect_all, "rebuild_sec": rebuild}
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-token-latency-sec", type=float, default=0.01)
    parser.add_argument("--spawn-executors", action="store_true",
                        help="each rank spawns its executor (imports torch itself) instead of forking it from the zygote")
    parser.add_argument("--run-dir", type=Path, default=None, help="keep logs here (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds} must be >= 1")
    with tempfile.TemporaryDirectory(prefix="engine-sim-bench-") as tmp:
        run_dir = args.run_dir or Path(tmp)
        results = []
        for n in range(1, args.rounds + 1):
            res = one_round(run_dir, n, args.per_token_latency_sec, zygote=not args.spawn_executors)
            results.append(res)
            print(f"round {n}: startup {res['startup_sec']:.2f}s  detect first/all "
                  f"{res['detect_first_sec'] * 1000:.0f}/{res['detect_all_sec'] * 1000:.0f} ms  "
                  f"rebuild {res['rebuild_sec'] * 1000:.0f} ms", flush=True)
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print(f"median of {len(results)} rounds (4 ranks, 2-core machine):")
    how = "executors spawned" if args.spawn_executors else "executors forked by the zygote"
    print(f"  4 ranks up (start -> all ready files, {how}): {med['startup_sec']:.2f} s")
    print(f"  fault -> first survivor UNHEALTHY:       {med['detect_first_sec'] * 1000:.0f} ms")
    print(f"  fault -> all survivors UNHEALTHY:        {med['detect_all_sec'] * 1000:.0f} ms")
    print(f"  apply -> all survivors HEALTHY (3 ranks): {med['rebuild_sec'] * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
