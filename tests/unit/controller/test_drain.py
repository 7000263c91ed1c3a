"""The drain of a scale-down round (RFC §3.2, §5: DEL of the currently published view, then the
apply): nothing published, and a DEL the Coordinator does not take. Neither fails the round (the
reasons: Strategy.drain and docs/rfc-575.md, deliberate deviations)."""

from __future__ import annotations

from .controller_fakes import FakeCoordinator, assemble, make_core, two_pods

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.base import Outcome
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.model.runtime import FtPhase

CALL, NOTE = controller_pb2.TIMELINE_EVENT_KIND_CALL, controller_pb2.TIMELINE_EVENT_KIND_NOTE


async def _round(core) -> tuple[DpScaleDownStrategy, Outcome]:
    rt = core.runtimes.get(7)
    strategy = DpScaleDownStrategy(core.deps, ScaleDownContext(
        7, rt.original_dp_ranks, rt.dead_committed, frozenset({1}), frozenset({0, 2, 3}), rt.fallback_strategy,
        core.clock.wall()))
    return strategy, await strategy.run()


async def test_with_nothing_published_no_del_is_sent_and_the_round_applies_and_publishes_the_survivors() -> None:
    """The first ADD failed and no SET got through since: the Coordinator routes nothing of the
    instance, so there is nothing to drain; the round goes on to its one apply, and the timeline
    says no DEL was sent instead of recording a call that never happened."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    coord.down = True
    await assemble(core, cluster)
    assert not core.runtimes.get(7).serving_published and coord.view == {}
    coord.down = False
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await _round(core)
    assert outcome.succeeded, outcome.detail
    assert [e[0] for e in coord.events] == ["ADD", "ADD"], "no DEL: nothing was published"
    assert len(cluster.named("apply")) == 2
    assert coord.view == {7: [0, 2, 3]}
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.SCALED_DOWN_RUNNING and rt.serving_published and rt.can_serve
    drains = [e for e in strategy.txn.events if e.name == "drain"]
    assert [(e.event_kind, e.detail) for e in drains] == [(NOTE, "nothing published: no DEL sent")]
    names = [e.name for e in strategy.txn.events if e.event_kind in (CALL, NOTE)]
    assert names.index("drain") < names.index("apply")


async def test_a_del_refused_for_a_view_the_coordinator_does_not_hold_does_not_fail_the_round() -> None:
    """The Coordinator's view changed behind the Controller's back (its DEL identity check
    refuses): the refusal is recorded, the round commits, and the ADD of the survivors replaces
    whatever the Coordinator held."""
    cluster, coord = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coord)
    await assemble(core, cluster)
    coord.view[7] = [0, 1, 2]
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await _round(core)
    assert outcome.succeeded, outcome.detail
    drain = next(e for e in strategy.txn.events if e.name == "drain")
    assert drain.event_kind == CALL and "identity" in drain.error
    assert len(cluster.named("apply")) == 2
    assert coord.view == {7: [0, 2, 3]} and core.runtimes.get(7).serving_published
