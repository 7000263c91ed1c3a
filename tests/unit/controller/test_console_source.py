"""The console's view of a real ControllerCore (in-memory peers, manual clock): the collection
window an instance waits on, in wall-clock time; the evidence held and the rank cells it gives;
after the round, the transaction with the stages `motorctl timeline` draws; and a standby's view."""

from __future__ import annotations

from gen.motor.v1 import controller_pb2
from motor.controller.clients import ControllerPeers
from motor.controller.clock import ManualClock
from motor.controller.console.feed import ConsoleFeed, ConsoleSource
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.stages import SCALE_DOWN_STAGES
from motor.controller.fencing import Leadership
from motor.controller.model.runtime import FtPhase
from motor.controller.persistence import MemoryRuntimeStore
from motor.controller.persistence.persister import read_only_view

from .controller_fakes import FakeCoordinator, FakeNodeManagers, assemble, make_config, make_core, settle, two_pods
from .test_controller_metrics import report

TIMEOUT_SEC = 8.0


async def test_the_console_shows_the_open_window_the_evidence_and_the_round() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster, make_config(software_status_collection_timeout_sec=TIMEOUT_SEC),
                            coordinator=FakeCoordinator())
    await assemble(core, cluster)
    feed = ConsoleFeed(ConsoleSource.of(core, lambda: {"is_leader": True}))
    assert feed.rows()[7]["cells"] == "hhhh" and feed.instance(7)["waits"] == []

    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    opened_wall = clock.wall()
    report(core, 0, controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY)
    doc = feed.instance(7)
    assert [w["what"] for w in doc["waits"]] == ["collection_timeout"]
    assert abs(doc["waits"][0]["until_unix_sec"] - (opened_wall + TIMEOUT_SEC)) < 1e-6
    assert [(e["rank"], e["health"]) for e in doc["evidence"]] == [(0, "unhealthy")]
    assert feed.rows()[7]["cells"] == "uhhh" and feed.rows()[7]["waiting"] == ["collection_timeout"]

    report(core, 1, controller_pb2.SOFTWARE_FAULT_KIND_DEAD)
    for r in (2, 3):
        report(core, r, controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY)
    clock.advance(0.5)
    await core.faults.evaluate_all()
    await settle(core)
    doc = feed.instance(7)
    assert doc["row"]["cells"] == "hrhh" and doc["row"]["phase"] == "SCALED_DOWN_RUNNING" and doc["waits"] == []
    assert doc["row"]["waiting"] == []
    txn = doc["transactions"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    assert [s["name"] for s in txn["stages"]] == list(SCALE_DOWN_STAGES)
    assert doc["runtime"]["dead_committed"] == [1]


async def test_a_standby_console_shows_what_the_store_holds_and_nothing_of_its_own() -> None:
    """A standby's rows are the runtimes the store holds (the leader's round in SCALING_DOWN), with no
    strategy, wait or evidence of its own."""
    store, cluster = MemoryRuntimeStore(), two_pods()
    previous, _ = make_core(cluster, store=store)
    await assemble(previous, cluster)
    previous.runtimes.set_phase(7, FtPhase.DECIDING)
    previous.runtimes.set_phase(7, FtPhase.SCALING_DOWN)
    await previous.persister.persist(7)
    leadership = Leadership(election_enabled=True, replica_id="c-2", address="c-2:1")
    standby = ControllerCore(make_config(), store, ControllerPeers(FakeNodeManagers(cluster), None),  # type: ignore[arg-type]
                             ManualClock(), leadership=leadership)
    feed = ConsoleFeed(ConsoleSource.of(standby, lambda: {"is_leader": False}))
    assert feed.rows() == {}  # nothing read from the store yet
    standby._standby_view = await read_only_view(store, True)
    row = feed.rows()[7]
    assert row["phase"] == "SCALING_DOWN" and row["cells"] == "hhhh" and row["strategy"] == ""
    assert row["waiting"] == [] and feed.instance(7)["evidence"] == []
