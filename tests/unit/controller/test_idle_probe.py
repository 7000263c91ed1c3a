"""The idle-fault probe (opt-in): a DEAD rank with HEALTHY survivors gets one canary at a time through
the Coordinator, bounded per collection window; its calls are in the timeline and the runtime. And
re-inference counts read from the Coordinator at the end of a transaction. In-memory peers."""

from __future__ import annotations

import asyncio


from gen.motor.v1 import coordinator_pb2
from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.fault_tolerance.idle_probe import next_candidates
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.testing.waits import async_wait_for

from .controller_fakes import DEAD, UNHEALTHY, FakeCoordinator, assemble, make_config, make_core, two_pods


def test_policy_one_canary_at_a_time_never_the_same_survivor_twice() -> None:
    base = {"active": {0, 1, 2, 3}, "dead": {1}, "routable": {0, 1, 2, 3}, "served": False}
    assert next_candidates(with_evidence={1}, probed=[], **base) == [0, 2, 3]
    assert next_candidates(with_evidence={1}, probed=[0], **base) == [], "the last canary's effect is not known yet"
    assert next_candidates(with_evidence={0, 1}, probed=[0], **base) == [2, 3]
    assert next_candidates(with_evidence={0, 1, 2, 3}, probed=[0], **base) == []
    assert next_candidates(with_evidence={1}, probed=[], **{**base, "dead": set()}) == []
    assert next_candidates(with_evidence={1}, probed=[], **{**base, "served": True}) == [], "served: the RFC decides"
    assert next_candidates(with_evidence={1}, probed=[], **{**base, "routable": {1, 3}}) == [3], "headless skipped"
    assert next_candidates(with_evidence={0, 1}, probed=[0], settling=True, **base) == [], \
        "the target reported just now: its peers' verdicts may still be on the way"


async def probing_core():
    """An assembled two-pod instance with the idle-fault probe on and fast snapshot pulls."""
    cluster, coordinator = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, config=make_config(idle_fault_probe=True), coordinator=coordinator)
    core.config = core.config.model_copy(update={"snapshot_pull_interval_sec": 0.01})
    core.deps.config = core.config
    await assemble(core, cluster)
    return cluster, coordinator, core


async def test_dead_rank_with_healthy_survivors_gets_a_canary_then_scales_down() -> None:
    cluster, coordinator, core = await probing_core()
    answered: list[int] = []

    def canary(instance_id: int, endpoint_ids: list[int]) -> coordinator_pb2.SendCanaryResponse:
        # The canary's step fails on every survivor: they turn unhealthy, as the engines do.
        answered.append(endpoint_ids[0])
        cluster.fault(dead={1}, unhealthy={0, 2, 3})
        return coordinator_pb2.SendCanaryResponse(endpoint_id=endpoint_ids[0], served=False, http_status=503,
                                                  detail="engine answered 503 (dp rank 0 is diagnosing)")

    coordinator.canary_answer = canary
    cluster.set(1, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: answered, 10.0, "a canary", interval_sec=0.005)
    assert [(c[0], c[1]) for c in coordinator.canaries] == [(7, [0, 2, 3])]
    assert coordinator.canaries[0][2] == core.config.fault_tolerance_config.idle_fault_probe_timeout_sec
    await core.faults.evaluate_all()  # the canary's target has no evidence yet: no second canary
    assert len(coordinator.canaries) == 1
    await async_wait_for(lambda: set(core.faults.evidence(7)) == {0, 1, 2, 3}, 10.0, "survivors unhealthy (pulled)",
                         interval_sec=0.005)
    assert core.runtimes.get(7).idle_fault_probes == 1
    coordinator.reinference[7] = 5
    await core.faults.evaluate_all()
    strategy = core.faults.running(7)
    assert isinstance(strategy, DpScaleDownStrategy)
    await async_wait_for(lambda: core.faults.running(7) is None, 10.0, "the round ended", interval_sec=0.005)
    txn = core.timelines.transactions(7)[-1]
    assert txn.outcome == "succeeded" and len(coordinator.canaries) == 1
    canaries = [e for e in txn.events if e.name == "canary"]
    assert len(canaries) == 1 and canaries[0].outcome == "engine_failed" and list(canaries[0].endpoint_ids) == [0]
    assert canaries[0].target == coordinator.address and canaries[0].request_id.startswith("probe-7-")
    note = next(e for e in txn.events if e.name == "reinference")
    assert note.migrated_requests == 5 and core.runtimes.get(7).migrated_requests == 5
    metrics = core.metrics.registry.get_sample_value
    assert metrics("motor_idle_fault_probes_total", {"outcome": "engine_failed"}) == 1.0
    assert metrics("motor_reinference_migrated_requests_total", {"instance_id": "7"}) == 5.0
    await core.faults.close()


async def test_off_by_default_and_a_served_canary_stops_probing() -> None:
    cluster, coordinator = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, coordinator=coordinator)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    await core.faults.evaluate_all()
    await asyncio.sleep(0.05)
    assert not coordinator.canaries, "the RFC's idle row: no canary unless idle_fault_probe"
    await core.faults.close()

    cluster, coordinator = two_pods(), FakeCoordinator()  # the default answer: served
    core, _ = make_core(cluster, config=make_config(idle_fault_probe=True), coordinator=coordinator)
    await assemble(core, cluster)
    cluster.set(1, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    for _ in range(3):
        await core.faults.evaluate_all()
        await asyncio.sleep(0.02)
    assert len(coordinator.canaries) == 1 and core.runtimes.get(7).idle_fault_probes == 1
    await core.faults.close()


async def test_dead_store_master_one_survivor_at_a_time_and_coordinator_errors_are_recorded() -> None:
    cluster, coordinator, core = await probing_core()

    def canary(instance_id: int, endpoint_ids: list[int]) -> coordinator_pb2.SendCanaryResponse:
        # Rank 0 (the store master) is dead: only the canaried survivor notices.
        cluster.set(endpoint_ids[0], UNHEALTHY)
        return coordinator_pb2.SendCanaryResponse(endpoint_id=endpoint_ids[0], served=False, http_status=503)

    coordinator.canary_answer = canary
    cluster.set(0, DEAD)
    core.faults.report_software(7, 0, EvidenceKind.DEAD, "executor died", core.clock.wall())
    probe = core.faults.idle_probe
    for _ in range(200):
        await core.faults.evaluate_all()
        if core.faults.running(7) is not None:
            break
        if probe.deadlines():  # a canary held back for the settle time: it becomes due when that passed
            sent = len(coordinator.canaries)
            await core.faults.evaluate_all()
            assert len(coordinator.canaries) == sent, "no canary before the settle time"
            core.clock.advance(probe.settle_sec)
        await asyncio.sleep(0.01)
    assert [c[1] for c in coordinator.canaries] == [[1, 2, 3], [2, 3], [3]]
    assert isinstance(core.faults.running(7), DpScaleDownStrategy)
    await async_wait_for(lambda: core.faults.running(7) is None, 10.0, "the round ended", interval_sec=0.005)
    assert [e.endpoint_ids[0] for e in core.timelines.transactions(7)[-1].events if e.name == "canary"] == [1, 2, 3]
    await core.faults.close()

    cluster, coordinator = two_pods(), FakeCoordinator()
    core, _ = make_core(cluster, config=make_config(idle_fault_probe=True), coordinator=coordinator)
    await assemble(core, cluster)
    coordinator.down = True
    cluster.set(1, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: core.runtimes.get(7).idle_fault_probes == 1, 10.0, "the failed canary recorded",
                         interval_sec=0.005)
    await core.faults.evaluate_all()
    assert len(coordinator.canaries) == 1, "no evidence from the target: no second canary"
    # Traffic arrives after all: the survivors notice, and the round's timeline shows the failed call.
    coordinator.down = False
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    for rank in (0, 2, 3):
        core.faults.report_software(7, rank, EvidenceKind.UNHEALTHY, "collective failed", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: core.faults.running(7) is None and core.timelines.transactions(7), 10.0,
                         "the round ended", interval_sec=0.005)
    canary = next(e for e in core.timelines.transactions(7)[-1].events if e.name == "canary")
    assert canary.outcome.startswith("error: ") and "down" in canary.error and not canary.endpoint_ids
    assert core.metrics.registry.get_sample_value("motor_idle_fault_probes_total", {"outcome": "error"}) == 1.0
    await core.faults.close()


async def test_peers_reporting_within_the_settle_time_get_no_second_canary() -> None:
    """The survivors of the failed collective turn unhealthy together; the canaried one's verdict may
    arrive first. A second canary waits for the settle time, and the peers' verdicts in it end probing."""
    cluster, coordinator, core = await probing_core()

    def canary(instance_id: int, endpoint_ids: list[int]) -> coordinator_pb2.SendCanaryResponse:
        cluster.fault(dead={1}, unhealthy={0, 2, 3})
        return coordinator_pb2.SendCanaryResponse(endpoint_id=endpoint_ids[0], served=False, http_status=503)

    coordinator.canary_answer = canary
    core.config = core.config.model_copy(update={"snapshot_pull_interval_sec": 0.0})  # verdicts only as reports
    core.deps.config = core.config
    cluster.set(1, DEAD)
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "executor died", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: core.runtimes.get(7).idle_fault_probes == 1, 10.0, "the first canary answered",
                         interval_sec=0.005)
    core.faults.report_software(7, 0, EvidenceKind.UNHEALTHY, "collective failed", core.clock.wall())  # the target
    await core.faults.evaluate_all()
    assert len(coordinator.canaries) == 1 and core.faults.idle_probe.deadlines(), "held back for the settle time"
    core.clock.advance(core.faults.idle_probe.settle_sec / 2)
    for rank in (2, 3):
        core.faults.report_software(7, rank, EvidenceKind.UNHEALTHY, "collective failed", core.clock.wall())
    await core.faults.evaluate_all()
    await async_wait_for(lambda: core.faults.running(7) is None and core.timelines.transactions(7), 10.0,
                         "the round ended", interval_sec=0.005)
    assert len(coordinator.canaries) == 1
    assert core.timelines.transactions(7)[-1].outcome == "succeeded"
    await core.faults.close()

