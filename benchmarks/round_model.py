"""The round-time model: the Controller-added time of a round when every NodeManager has its own node.

On this machine every NodeManager, the engines and the Controller share two cores, so a DP=256
round waits for 32 NodeManagers' work done one after another. In a fleet each pod has its own host,
and the round's critical path is

    the Controller's own time (decision → published with no call outstanding, measured)
  + the slowest NodeManager's CPU per round above its idle rate (its calls, the polls and reports
    of the fault, as if every bit were on the path: an upper bound)
  + its engines' share of the engine CPU (the light engines of an instance are one process here;
    on a node, a pod's engines answer only their own pod)
  + the long poll's cadence after the rebuild (half the re-read interval of `nodemanager.settle`'s
    schedule at the measured rebuild's end)
  + one network round trip per sequential call burst of the round (guard, status, apply, long
    poll, finalize, publish: the fan-outs' bursts on the Controller's timeline), `rtt_ms` each.

The model is checked against the measured round at DP 16, where only two NodeManagers share the
machine (their work is nearly what it is on own nodes).
"""

from __future__ import annotations

from typing import Any

from benchmarks.timing import calls, end
from nodemanager.settle import reread_delay_sec

DEFAULT_RTT_MS = 0.5  # one round trip inside a data centre


def call_bursts(txn: dict[str, Any]) -> int:
    """How many sequential bursts of calls the round made (overlapping calls are one burst)."""
    intervals = sorted((e["at_unix_sec"], end(e)) for e in calls(txn))
    bursts, cur_end = 0, None
    for start, stop in intervals:
        if cur_end is None or start > cur_end:
            bursts += 1
            cur_end = stop
        else:
            cur_end = max(cur_end, stop)
    return bursts


def settle_wait_ms(rebuild_ms: float) -> float:
    """The expected wait for the long poll's next re-read after a rebuild of `rebuild_ms`: half the
    re-read interval in effect then (the rebuild ends anywhere within it)."""
    if rebuild_ms != rebuild_ms:
        return 0.0
    at, n = 0.0, 0
    while n < 1000:
        step = 1000 * reread_delay_sec(n)
        if at + step >= rebuild_ms:
            return step / 2
        at += step
        n += 1
    return 0.0


def model(*, controller_own_ms: float, slowest_nm_cpu_ms: float, engine_cpu_ms: float, nodemanagers: int,
          rebuild_ms: float, bursts: float, rtt_ms: float = DEFAULT_RTT_MS) -> dict[str, float]:
    parts = {
        "controller_own_ms": controller_own_ms,
        "slowest_nodemanager_cpu_ms": slowest_nm_cpu_ms,
        "engines_per_node_cpu_ms": engine_cpu_ms / max(1, nodemanagers),
        "settle_wait_ms": settle_wait_ms(rebuild_ms),
        "network_ms": bursts * rtt_ms,
    }
    return {**parts, "modelled_added_ms": sum(parts.values()), "rtt_ms": rtt_ms, "bursts": bursts}
