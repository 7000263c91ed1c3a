"""A write of the runtime that fails is written again, with a capped backoff, until the store holds
it: after a round's commit nothing else would write the instance, and a restart must find the
committed SCALED_DOWN_RUNNING, not the POST_SCALE_CLEANUP before it (in-memory peers and store,
manual clock)."""

from __future__ import annotations

import asyncio

from .controller_fakes import FakeNodeManagers, assemble, make_config, make_core, two_pods

from motor.controller.clients import ControllerPeers
from motor.controller.clock import ManualClock
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import MemoryRuntimeStore, StoreError
from motor.controller.persistence.persister import RETRY_FIRST_DELAY_SEC, RETRY_MAX_DELAY_SEC


class FlakyStore(MemoryRuntimeStore):
    """Refuses the first `failures` writes of records in `phase` (etcd unreachable for a while)."""

    def __init__(self, phase: str, failures: int) -> None:
        super().__init__()
        self.phase, self.failures = phase, failures
        self.refused = 0

    async def put(self, record, expected_generation):
        if record.phase == self.phase and self.refused < self.failures:
            self.refused += 1
            raise StoreError(f"injected: etcd unavailable (put {record.phase})")
        await super().put(record, expected_generation)

    async def close(self) -> None:
        """Outlives the Controller that closes it, as etcd does: the restarted one reads it."""


async def test_a_failed_write_after_commit_is_retried_until_the_store_holds_the_committed_state() -> None:
    store = FlakyStore("SCALED_DOWN_RUNNING", failures=6)
    cluster = two_pods()
    core, clock = make_core(cluster, store=store)
    await core.start()
    try:
        await assemble(core, cluster)
        cluster.fault(dead={1}, unhealthy={0, 2, 3})
        rt = core.runtimes.get(7)
        ctx = ScaleDownContext(7, rt.original_dp_ranks, rt.dead_committed, frozenset({1}), frozenset({0, 2, 3}),
                               rt.fallback_strategy, clock.wall())
        started = clock.monotonic()
        outcome = await DpScaleDownStrategy(core.deps, ctx).run()
        assert outcome.succeeded, outcome.detail
        assert rt.phase is FtPhase.SCALED_DOWN_RUNNING and rt.serving_published, "the publication did not wait"
        assert store.refused >= 1 and rt.last_error and "persisting runtime failed" in rt.last_error

        async def stored_phase() -> str | None:
            record = await store.load(7)
            return None if record is None else record.phase

        for _ in range(2000):
            if await stored_phase() == "SCALED_DOWN_RUNNING":
                break
            await asyncio.sleep(0)
        assert await stored_phase() == "SCALED_DOWN_RUNNING", f"store holds {await stored_phase()}"
        assert store.refused == 6 and core.persister.unsaved() == []
        assert rt.last_error is None, "the write landed: its error is cleared"
        # Six refusals, the round's own write and five retries: they waited a doubling, capped backoff
        # (0.5 + 1 + 2 + 4 + 8 s on the manual clock, beside the round's own polls), not a hot loop.
        waited = clock.monotonic() - started
        assert RETRY_FIRST_DELAY_SEC * (2**5 - 1) <= waited <= 5 * RETRY_MAX_DELAY_SEC, waited
    finally:
        await core.stop()
    # A restart reads the committed round: scaled down, nothing to reconfigure.
    peers = ControllerPeers(FakeNodeManagers(cluster), None)  # type: ignore[arg-type]
    restarted = ControllerCore(make_config(), store, peers, ManualClock())
    interrupted = await restarted.persister.restore(restarted.clock)
    runtime = restarted.runtimes.get(7)
    assert interrupted == [] and runtime.phase is FtPhase.SCALED_DOWN_RUNNING and runtime.dead_committed == {1}
