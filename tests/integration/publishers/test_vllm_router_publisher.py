"""The vllm-router publisher against a worker API on a real HTTP server: a scale-down round drains
the instance's workers before the apply and publishes the survivors after the commit; the SET and
the reconcile repair drift (a restarted router, a worker added by hand); a router that does not
answer is retried, then reported (health, metrics, can_serve) and repaired once it answers again."""

from __future__ import annotations

import asyncio

import pytest

from ...unit.controller.controller_fakes import FakeCoordinator, FakeNodeManagers, assemble, make_config, two_pods
from .fake_router import FakeRouter

from motor.common.config.publication import VllmRouterConfig
from motor.controller.clients import ControllerPeers
from motor.controller.clock import ManualClock
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.reconfiguration import ReconfigurationStrategy
from motor.controller.fault_tolerance.decision import FallbackCause
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.persistence.memory import MemoryRuntimeStore
from motor.controller.router_client import VllmRouterClient
from motor.testing.waits import async_wait_for

WORKERS = [f"http://{ip}:{8000 + r}" for ip, r in (("127.0.0.2", 0), ("127.0.0.2", 1), ("127.0.0.3", 2),
                                                     ("127.0.0.3", 3))]


@pytest.fixture
async def router():
    fake = await FakeRouter().start()
    try:
        yield fake
    finally:
        await fake.stop()


def _core(cluster, router: FakeRouter, coordinator=None, required: bool = True, reconcile_interval_sec: float = 60.0):
    config = VllmRouterConfig(url=router.url, request_timeout_sec=1.0, attempts=3, backoff_initial_sec=0.01,
                              backoff_max_sec=0.02, reconcile_interval_sec=reconcile_interval_sec, required=required)
    clock = ManualClock()
    cluster.clock = clock
    peers = ControllerPeers(FakeNodeManagers(cluster), coordinator, [VllmRouterClient(config)])  # type: ignore[arg-type]
    return ControllerCore(make_config(), MemoryRuntimeStore(), peers, clock)


def _publisher(core):
    return next(p for p in core.pusher.publishers if p.health.kind == "vllm_router")


async def _round(core):
    rt = core.runtimes.get(7)
    strategy = DpScaleDownStrategy(core.deps, ScaleDownContext(
        7, rt.original_dp_ranks, rt.dead_committed, frozenset({1}), frozenset({0, 2, 3}), rt.fallback_strategy,
        core.clock.wall()))
    return strategy, await strategy.run()


async def test_a_round_drains_the_workers_before_the_apply_and_publishes_the_survivors_after_the_commit(router) -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core = _core(cluster, router, coord)
    await assemble(core, cluster)
    assert sorted(router.workers) == WORKERS and core.runtimes.get(7).serving_published
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    strategy, outcome = await _round(core)
    assert outcome.succeeded, outcome.detail
    assert sorted(router.workers) == [WORKERS[0], *WORKERS[2:]] and coord.view == {7: [0, 2, 3]}
    removals = router.named("remove_worker")
    assert sorted(c[1] for c in removals) == WORKERS and removals[-1][2] == ()  # all drained, the dead one too
    # The drain happened before the apply: the timeline's drain call precedes the apply calls.
    names = [e.name for e in strategy.txn.events]
    assert names.index("drain") < names.index("apply") < names.index("publish")
    drain = next(e for e in strategy.txn.events if e.name == "drain")
    assert not drain.error and list(drain.endpoint_ids) == [0, 1, 2, 3]
    rt = core.runtimes.get(7)
    assert rt.serving_published and rt.can_serve
    await core.stop()


async def test_the_reconcile_puts_back_what_a_restarted_router_lost_and_the_set_removes_a_worker_added_by_hand(
        router) -> None:
    cluster = two_pods()
    core = _core(cluster, router, reconcile_interval_sec=0.05)
    await assemble(core, cluster)
    publisher = _publisher(core)
    router.workers.clear()  # a restart: vllm-router keeps its list in memory only
    assert await publisher.reconcile() == (4, 0)
    assert sorted(router.workers) == WORKERS
    router.workers.append("http://10.9.9.9:8000")  # by hand: before any SET it may be a previous leader's
    assert await publisher.reconcile() == (0, 0)
    assert await core.publish_all() == [7]
    assert sorted(router.workers) == WORKERS
    router.workers.append("http://10.9.9.9:8000")  # after the SET the list is Motor's: drift
    assert await publisher.reconcile() == (0, 1)
    # The loop itself, while the core acts: a second restart is repaired without a call from the test.
    core.pusher.start()
    router.workers.clear()
    await async_wait_for(lambda: sorted(router.workers) == WORKERS, 10.0, "the reconcile loop re-added the workers")
    assert publisher.health.repairs >= 9
    sample = core.metrics.registry.get_sample_value
    assert sample("motor_publisher_repairs_total", {"publisher": publisher.health.name, "action": "added"}) >= 8
    await core.stop()


@pytest.mark.parametrize("required", [True, False])
async def test_a_router_that_does_not_answer_is_retried_reported_and_repaired(router, required: bool) -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core = _core(cluster, router, coord, required=required)
    router.fail_status = 503
    await assemble(core, cluster)
    rt = core.runtimes.get(7)
    adds = router.named("add_worker")
    assert len(adds) == 3, "three tries of the first add, then the publication counts as failed"
    publisher = _publisher(core)
    assert publisher.health.up is False and "HTTP 503" in publisher.health.last_error
    assert coord.view == {7: [0, 1, 2, 3]}, "the Coordinator got the view all the same"
    # The acknowledgement rule: a required router that did not take the view keeps can_serve false.
    assert rt.serving_published is (not required) and rt.can_serve is (not required)
    if required:
        assert "vllm_router:" in rt.last_error and "HTTP 503" in rt.last_error
    status = {p["name"]: p for p in core.pusher.health()}
    assert status[publisher.health.name]["up"] is False and status["coordinator"]["up"] is True
    sample = core.metrics.registry.get_sample_value
    labels = {"publisher": publisher.health.name}
    assert sample("motor_publisher_up", labels) == 0
    assert sample("motor_publisher_calls_total", {**labels, "call": "add_worker", "outcome": "failed"}) == 1
    router.fail_status = None
    assert await core.publish_all() == [7]  # the next SET converges it
    assert sorted(router.workers) == WORKERS and publisher.health.up and sample("motor_publisher_up", labels) == 1
    assert rt.serving_published and rt.can_serve
    await core.stop()


async def test_a_new_leader_drains_the_workers_a_previous_one_published(router) -> None:
    """Nothing published in this term yet: the first drain withdraws the instance's workers the router
    lists (read at takeover), and leaves a worker of another instance alone."""
    cluster = two_pods()
    core = _core(cluster, router)
    router.workers.extend([*WORKERS, "http://10.9.9.9:8000"])
    await core.pusher.learn(1.0)
    await assemble(core, cluster)  # publishes afresh; forget it to stand where a takeover stands
    core.pusher.forget()
    await core.pusher.learn(1.0)
    record = core.registry.get(7)
    assert await core.pusher.drain(record.topology()) == (0, 1, 2, 3)
    assert router.workers == ["http://10.9.9.9:8000"]
    await core.stop()


async def test_a_drain_the_router_did_not_take_is_completed_by_the_reconcile_never_undone(router) -> None:
    """The round goes on past a failed drain (its timeline says so); once the router answers again,
    the reconcile removes the drained workers instead of putting them back, and the commit's ADD
    brings back the survivors only."""
    cluster = two_pods()
    core = _core(cluster, router)
    await assemble(core, cluster)
    publisher = _publisher(core)
    router.fail_status = 503
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    rt = core.runtimes.get(7)
    strategy = DpScaleDownStrategy(core.deps, ScaleDownContext(
        7, rt.original_dp_ranks, rt.dead_committed, frozenset({1}), frozenset({0, 2, 3}), rt.fallback_strategy,
        core.clock.wall()))
    drained = asyncio.Event()
    real_drain = publisher.drain

    async def drain_then_recover(topology):
        try:
            return await real_drain(topology)
        finally:
            router.fail_status = None
            assert await publisher.reconcile() == (0, 4), "the drained workers removed, none put back"
            drained.set()

    publisher.drain = drain_then_recover
    outcome = await strategy.run()
    assert drained.is_set() and outcome.succeeded, outcome.detail
    drain = next(e for e in strategy.txn.events if e.name == "drain")
    assert "HTTP 503" in drain.error
    assert sorted(router.workers) == [WORKERS[0], *WORKERS[2:]]
    await core.stop()


async def test_a_reconfigured_instance_is_withdrawn_while_it_restarts_and_published_again_when_ready(router) -> None:
    """The fallback goes through the same publication: the router lists none of the instance's
    workers while the engines restart, and every rank again once they are ready."""
    cluster = two_pods()
    core = _core(cluster, router)
    await assemble(core, cluster)
    listed_at_start: list[list[str]] = []
    fail_check = cluster._maybe_fail

    def note_router(name: str, address: str) -> None:  # the fake NodeManagers' hook on every call
        if name == "start_engines":
            listed_at_start.append(list(router.workers))
        fail_check(name, address)

    cluster._maybe_fail = note_router
    strategy = ReconfigurationStrategy(core.deps, 7, "test", FallbackCause.STRATEGY_FAILED)
    outcome = await strategy.run()
    assert outcome.succeeded, outcome.detail
    assert listed_at_start and all(listed == [] for listed in listed_at_start)
    assert sorted(router.workers) == WORKERS and core.runtimes.get(7).serving_published
    await core.stop()
