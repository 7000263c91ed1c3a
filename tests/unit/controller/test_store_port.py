"""The TCPStore port each scale-down round's applies carry: a new one every round, also when the new
master stays the same, inside the range the NodeManager's config allows (base .. base + dp_size - 1)."""

from __future__ import annotations

from .controller_fakes import assemble, make_core, two_pods

from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy


async def scale_down(core, cluster, dead: int) -> set[int]:
    rt = core.runtimes.get(7)
    survivors = set(rt.active_ranks) - {dead}
    cluster.fault(dead={dead}, unhealthy=survivors)
    calls_before = len(cluster.calls)
    ctx = ScaleDownContext(7, rt.original_dp_ranks, rt.dead_committed, frozenset({dead}), frozenset(survivors),
                           rt.fallback_strategy, core.clock.wall())
    outcome = await DpScaleDownStrategy(core.deps, ctx).run()
    assert outcome.succeeded, outcome.detail
    applies = [c for c in cluster.calls[calls_before:] if c[0] == "apply"]
    assert {a[5] for a in applies} == {0}  # rank 0 stays the new master
    return {a[7] for a in applies}


async def test_consecutive_rounds_with_the_same_master_get_different_store_ports() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster, store_port_base=31000)
    first = await scale_down(core, cluster, dead=1)
    second = await scale_down(core, cluster, dead=2)
    assert len(first) == len(second) == 1 and first != second
    dp_size = 4
    assert all(31000 <= port <= 31000 + dp_size - 1 for port in first | second)
