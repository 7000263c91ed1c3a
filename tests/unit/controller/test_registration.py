"""Pods and their NodeManager addresses: one address per pod of an instance, refused at
registration (InstanceRegistry, pure), and failed closed by a round's topology check before any
guard for a topology that holds a shared address anyway (restored from a store)."""

from __future__ import annotations

import pytest
from .controller_fakes import FakeCluster, assemble, make_core, register_request, two_pods

from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.instances import InstanceRegistry, RegistrationError


def test_a_second_pod_on_the_nodemanager_address_of_another_is_refused_naming_both_and_the_address() -> None:
    """Every call of a round goes to a pod's NodeManager by address: two pods behind one address
    would have one NodeManager answer for both, so the second registration is refused."""
    cluster = two_pods()
    registry = InstanceRegistry()
    registry.register(register_request(cluster, "127.0.0.2:1"), 0.0)
    clash = register_request(cluster, "127.0.0.3:1")
    clash.pod.node_manager_address = "127.0.0.2:1"
    with pytest.raises(RegistrationError) as info:
        registry.register(clash, 1.0)
    assert info.value.precondition
    message = str(info.value)
    assert "pod 127.0.0.3" in message and "pod 127.0.0.2" in message and "127.0.0.2:1" in message
    record = registry.get(7)
    assert record is not None and list(record.pods) == ["127.0.0.2"] and not record.assembled


def test_a_pod_re_registering_onto_another_pods_nodemanager_address_is_refused() -> None:
    cluster = two_pods()
    registry = InstanceRegistry()
    for address in cluster.pods:
        registry.register(register_request(cluster, address), 0.0)
    moved = register_request(cluster, "127.0.0.2:1")
    moved.pod.node_manager_address = "127.0.0.3:1"
    with pytest.raises(RegistrationError, match=r"pod 127\.0\.0\.2.*127\.0\.0\.3:1.*pod 127\.0\.0\.3"):
        registry.register(moved, 1.0)
    record = registry.get(7)
    assert record is not None and record.pods["127.0.0.2"].node_manager_address == "127.0.0.2:1"


def test_a_pod_may_re_register_with_its_own_or_a_fresh_nodemanager_address() -> None:
    cluster = two_pods()
    registry = InstanceRegistry()
    for address in cluster.pods:
        registry.register(register_request(cluster, address), 0.0)
    registry.register(register_request(cluster, "127.0.0.2:1"), 1.0)
    moved = register_request(cluster, "127.0.0.2:1")
    moved.pod.node_manager_address = "127.0.0.2:2"
    record, _ = registry.register(moved, 2.0)
    assert record.pods["127.0.0.2"].node_manager_address == "127.0.0.2:2" and record.assembled


def test_pods_of_different_instances_are_not_compared() -> None:
    """Instances are never forgotten, so a vanished instance's address may come back on another
    instance's pod (pod IPs are reused): only the pods of one instance must differ."""
    registry = InstanceRegistry()
    registry.register(register_request(FakeCluster(pods={"127.0.0.2:1": (0,)}), "127.0.0.2:1", instance_id=1), 0.0)
    record, newly = registry.register(
        register_request(FakeCluster(pods={"127.0.0.2:1": (0,)}), "127.0.0.2:1", instance_id=2), 1.0)
    assert newly and record.instance_id == 2


async def test_a_round_over_pods_sharing_a_nodemanager_address_fails_before_any_guard_naming_them() -> None:
    cluster = two_pods()
    core, _ = make_core(cluster)
    await assemble(core, cluster)
    # As a topology persisted with the shared address would come back.
    core.registry.get(7).pods["127.0.0.3"].node_manager_address = "127.0.0.2:1"
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    rt = core.runtimes.get(7)
    strategy = DpScaleDownStrategy(core.deps, ScaleDownContext(
        7, rt.original_dp_ranks, rt.dead_committed, frozenset({1}), frozenset({0, 2, 3}), rt.fallback_strategy,
        core.clock.wall()))
    outcome = await strategy.run()
    assert not outcome.succeeded and outcome.fallback
    assert "pods 127.0.0.2 and 127.0.0.3 share NodeManager address 127.0.0.2:1" in outcome.detail, outcome.detail
    assert not cluster.named("guard") and not cluster.named("status") and not cluster.named("apply")
