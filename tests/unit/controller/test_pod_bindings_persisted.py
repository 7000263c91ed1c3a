"""A pod's binding to the pod URI that registered it first is persisted with the instance's
topology: a restarted Controller (or a new leader) restores it, a pod restored unbound is written
once it binds, and the binding never reaches the published serving view."""

from __future__ import annotations

from .controller_fakes import make_core, register_request, two_pods

from gen.motor.v1 import common_pb2
from motor.controller.persistence import MemoryRuntimeStore

A, B = "127.0.0.2:1", "127.0.0.3:1"
URI_A, URI_B = "spiffe://motor/ns/motor/pod/a", "spiffe://motor/ns/motor/pod/b"


class KeptStore(MemoryRuntimeStore):
    async def close(self) -> None:
        """Outlives the Controller that closes it, as etcd does: the restarted one reads it."""


async def _stored_uris(store: MemoryRuntimeStore) -> dict[str, str]:
    record = await store.load(7)
    assert record is not None
    return {p.pod_ip: p.bound_pod_uri for p in common_pb2.Instance.FromString(record.topology).pods}


async def test_bindings_survive_a_restart_and_stay_out_of_the_serving_view() -> None:
    store, cluster = KeptStore(), two_pods()
    core, _ = make_core(cluster, store=store)
    await core.start()
    await core.register(register_request(cluster, A), URI_A)
    await core.register(register_request(cluster, B), URI_B)
    assert await _stored_uris(store) == {"127.0.0.2": URI_A, "127.0.0.3": URI_B}
    assert all(not p.bound_pod_uri for p in core.registry.get(7).topology().pods)
    await core.stop()

    restarted, _ = make_core(cluster, store=store)
    await restarted.start()
    try:
        assert restarted.registry.get(7).bindings() == {"127.0.0.2": URI_A, "127.0.0.3": URI_B}
    finally:
        await restarted.stop()


async def test_a_pod_restored_unbound_is_persisted_once_it_binds() -> None:
    store, cluster = KeptStore(), two_pods()
    core, _ = make_core(cluster, store=store)
    await core.start()
    for address in (A, B):  # plaintext: nothing to bind
        await core.register(register_request(cluster, address))
    await core.stop()
    assert await _stored_uris(store) == {"127.0.0.2": "", "127.0.0.3": ""}

    restarted, _ = make_core(cluster, store=store)
    await restarted.start()
    try:
        generation = (await store.load(7)).generation
        await restarted.register(register_request(cluster, B), URI_B)
        stored = await store.load(7)
        assert stored.generation == generation  # the runtime did not change, only the binding
        assert await _stored_uris(store) == {"127.0.0.2": "", "127.0.0.3": URI_B}
    finally:
        await restarted.stop()
