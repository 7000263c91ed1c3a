"""A pod recreated at a new address for ranks the Controller retired replaces the pod it stands for
(InstanceRegistry, pure; ControllerCore: persisted, no reconfiguration); anything else a new
address claims of an assembled instance is still refused."""

from __future__ import annotations

import pytest
from .controller_fakes import FakeCluster, assemble, make_core, register_request, two_pods

from motor.controller.instances import InstanceRegistry, RegistrationError
from motor.controller.model.runtime import FtPhase

REPLACEMENT = "127.0.0.12:1"


def _replacement(cluster: FakeCluster, retired: bool = True):
    old = cluster.pods.pop("127.0.0.2:1")
    cluster.pods[REPLACEMENT] = old
    req = register_request(cluster, REPLACEMENT)
    del cluster.pods[REPLACEMENT]
    cluster.pods["127.0.0.2:1"] = old
    if retired:
        req.retired_ids.extend(req.pod.endpoint_ids)
    return req


def _assembled() -> tuple[FakeCluster, InstanceRegistry]:
    cluster = two_pods()
    registry = InstanceRegistry()
    for address in cluster.pods:
        registry.register(register_request(cluster, address), 0.0)
    return cluster, registry


def test_a_recreated_pod_replaces_the_silent_pod_whose_ranks_are_all_committed_dead() -> None:
    cluster, registry = _assembled()
    record, newly = registry.register(_replacement(cluster), 10.0, dead_committed=frozenset({0, 1}),
                                      silent_for_sec=6.0)
    assert not newly and sorted(record.pods) == ["127.0.0.12", "127.0.0.3"]
    assert record.pods["127.0.0.12"].retired == {0, 1} and record.original_dp_ranks == (0, 1, 2, 3)
    assert record.endpoint_infos()[0].ip == "127.0.0.12"


@pytest.mark.parametrize(("dead", "retired", "now_sec"), [
    ({0}, True, 10.0),         # rank 1 still serves on the old pod
    ({0, 1}, False, 10.0),     # the new pod would run the ranks at once
    ({0, 1}, True, 5.0),       # the old pod heartbeated 5 s ago: still alive
], ids=["rank-still-serving", "not-registered-retired", "old-pod-alive"])
def test_a_new_address_that_is_no_replacement_is_refused(dead: set[int], retired: bool, now_sec: float) -> None:
    cluster, registry = _assembled()
    with pytest.raises(RegistrationError, match="already hosted by pod 127.0.0.2"):
        registry.register(_replacement(cluster, retired), now_sec, dead_committed=frozenset(dead), silent_for_sec=6.0)
    assert sorted(registry.get(7).pods) == ["127.0.0.2", "127.0.0.3"]


async def test_the_controller_takes_a_replacement_pod_without_a_reconfiguration_and_persists_it() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster)
    for phase in (FtPhase.DECIDING, FtPhase.SCALING_DOWN, FtPhase.POST_SCALE_CLEANUP, FtPhase.SCALED_DOWN_RUNNING):
        core.runtimes.set_phase(7, phase)
    core.runtimes.commit_round(7, [0, 1])
    generation = core.runtimes.get(7).generation
    clock.advance(core.config.heartbeat_timeout_sec + 1)
    response = await core.register(_replacement(cluster))
    assert response.accepted
    runtime = core.runtimes.get(7)
    assert runtime.phase is FtPhase.SCALED_DOWN_RUNNING and runtime.dead_committed == {0, 1}
    assert runtime.generation == generation + 1 and core.faults.running(7) is None
    stored = await core.store.load(7)
    assert stored is not None and stored.generation == runtime.generation
    assert sorted(core.registry.get(7).pods) == ["127.0.0.12", "127.0.0.3"]
