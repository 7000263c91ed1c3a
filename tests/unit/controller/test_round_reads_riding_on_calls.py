"""The round's status reads that ride on its guard and its apply (`then_status`), against in-memory
NodeManagers and a manual clock: one call per pod where there were two, the timeline still shows
both calls (so the stages are measured as before), a NodeManager that predates the field is read
with a Status call of its own, and the wait after the apply is bounded from the apply's answer."""

from __future__ import annotations

import grpc

from motor.controller.fault_tolerance.engine_states import APPLY_WAIT_STATES, RECOVERY_WAIT_STATES
from motor.controller.fault_tolerance.stages import scale_down_stages

from .controller_fakes import assemble, make_core, run_scale_down, two_pods


def calls_per_pod(cluster, address: str) -> list[str]:
    return [c[0] for c in cluster.calls if c[1] == address]


async def test_the_first_reads_ride_on_the_guard_and_the_apply() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    guards = [then for name, _, then in cluster.then_statuses if name == "guard"]
    applies = [then for name, _, then in cluster.then_statuses if name == "apply"]
    assert len(guards) == 2 and len(applies) == 2
    # The guard carries the apply-readiness read, the apply the rebuild's first long poll.
    assert {tuple(t.endpoint_ids) for t in guards} == {(0,), (2, 3)}
    assert all({(w.status, w.ft_state) for w in t.wait_while} == APPLY_WAIT_STATES for t in guards)
    assert {tuple(t.endpoint_ids) for t in applies} == {(0,), (2, 3)}
    assert all({(w.status, w.ft_state) for w in t.wait_while} == RECOVERY_WAIT_STATES for t in applies)
    # The timeline shows each pod's guard and apply followed by the read it carried, so the stages
    # are as they were.
    events = [(e.name, e.target) for e in strategy.txn.events if e.name in ("guard", "status", "apply")]
    for address in ("127.0.0.2:1", "127.0.0.3:1"):
        mine = [n for n, t in events if t == address]
        assert mine[:4] == ["guard", "status", "apply", "status"], mine
    stages = [s.name for s in scale_down_stages(strategy.txn.proto)]
    assert stages[-5:] == ["guard", "apply_ready", "apply", "rebuild", "commit"], stages


async def test_a_nodemanager_that_predates_the_field_is_read_with_a_status_call() -> None:
    cluster = two_pods()
    cluster.predate_then_status = True
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail
    for address in ("127.0.0.2:1", "127.0.0.3:1"):
        mine = [n for n in calls_per_pod(cluster, address) if n in ("guard", "status", "apply")]
        assert mine[:4] == ["guard", "status", "apply", "status"], mine
    # Each read is its own call in the timeline; none is recorded twice.
    reads = [e for e in strategy.txn.events if e.name == "status"]
    assert len(reads) == len(cluster.named("status"))


async def test_the_wait_after_the_apply_counts_from_the_apply_answer() -> None:
    """RFC §7: execution_deadline_sec bounds the wait before the apply and the wait after it, each:
    an apply that took most of it leaves the rebuild its whole bound."""
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    deadline = core.deps.config.fault_tolerance_config.dp_scale_down_config.execution_deadline_sec
    cluster.engines[3].recover_after_polls = 3
    cluster.on_apply = lambda: clock.advance(deadline - 0.5)  # one NodeManager's apply is that slow
    _, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert outcome.succeeded, outcome.detail


async def test_a_failed_read_riding_on_the_apply_fails_the_round_as_a_status_call_would() -> None:
    """The apply was accepted and its read failed: the round fails on the read ("status to ..."),
    not on the apply, and the timeline shows the apply answered and the read failed."""
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    cluster.on_apply = lambda: cluster.fail.update({("status", "127.0.0.3:1"): grpc.StatusCode.DEADLINE_EXCEEDED})
    strategy, outcome = await run_scale_down(core, {1}, {0, 2, 3})
    assert not outcome.succeeded and "status to 127.0.0.3:1 failed: DEADLINE_EXCEEDED" in outcome.detail, outcome.detail
    assert "apply not accepted" not in outcome.detail
    mine = [(e.name, e.error) for e in strategy.txn.events
            if e.target == "127.0.0.3:1" and e.name in ("apply", "status")]
    assert mine[-2][0] == "apply" and not mine[-2][1]
    assert mine[-1][0] == "status" and "DEADLINE_EXCEEDED" in mine[-1][1]
    # Every participant was aborted.
    assert {c[1] for c in cluster.named("finalize") if not c[3]} == {"127.0.0.2:1", "127.0.0.3:1"}
