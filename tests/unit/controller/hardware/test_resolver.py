"""TopologyResolver: every mapping rule of RFC §4.2."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gen.motor.v1 import common_pb2
from motor.controller.config import HardwareMonitorConfig
from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.resolver import InstanceTopology, TopologyResolver, Unmappable

RESOLVER = TopologyResolver()


def _ep(rank: int, ip: str, cards: list[str], headless: bool = False) -> common_pb2.Endpoint:
    ep = common_pb2.Endpoint(id=rank, ip=ip, business_port=0 if headless else 8000 + rank, headless=headless)
    for card in cards:
        ep.device_infos.add(device_id=card)
    return ep


def _instance(instance_id: int, pods: list[tuple[str, str, list[common_pb2.Endpoint]]], active: bool = True,
              listed: dict[str, list[int]] | None = None) -> InstanceTopology:
    inst = common_pb2.Instance(id=instance_id, model="m", dp_size=sum(len(eps) for _, _, eps in pods))
    for pod_ip, node, eps in pods:
        ids = (listed or {}).get(pod_ip, [e.id for e in eps])
        inst.pods.add(pod_ip=pod_ip, node_name=node, node_manager_address=f"{pod_ip}:7000", endpoint_ids=ids)
        inst.endpoints.extend(eps)
    return InstanceTopology(inst, active)


def _fault(node: str, npu: str = "", codes: tuple[str, ...] = ("80E18402",), level: int = levels.L6) -> HardwareFault:
    return HardwareFault(node_name=node, npu_name=npu, fault_codes=codes, level=level, fault_type="CardUnhealthy")


# Instance 7: ranks 0,1 on worker-7 (rank 0 spans two cards), ranks 2 (headless), 3 on worker-8.
# Instance 9: ranks 0,1 on worker-7 too, other cards.
INST7 = _instance(7, [
    ("10.0.0.1", "worker-7", [_ep(0, "10.0.0.1", ["Ascend910-0", "Ascend910-1"]), _ep(1, "10.0.0.1", ["Ascend910-2"])]),
    ("10.0.0.2", "worker-8", [_ep(2, "10.0.0.2", ["Ascend910-2"], headless=True), _ep(3, "10.0.0.2", ["Ascend910-3"])]),
])
INST9 = _instance(9, [
    ("10.0.0.3", "worker-7", [_ep(0, "10.0.0.3", ["Ascend910-4"]), _ep(1, "10.0.0.3", ["Ascend910-5"])]),
])
CLUSTER = [INST7, INST9]


def test_card_maps_to_the_rank_that_lists_it() -> None:
    result = RESOLVER.resolve(_fault("worker-7", "Ascend910-2"), CLUSTER)
    assert result.unmappable is None
    assert result.ranks_by_instance() == {7: frozenset({1})}
    assert result.unaffected_instance_ids == (9,)
    assert result.key == (("80E18402",), "Ascend910-2", "worker-7")


def test_a_rank_spanning_cards_is_hit_by_either() -> None:
    for card in ("Ascend910-0", "Ascend910-1"):
        assert RESOLVER.resolve(_fault("worker-7", card), CLUSTER).ranks_by_instance() == {7: frozenset({0})}


def test_same_card_name_on_another_node_is_not_confused() -> None:
    # worker-8's Ascend910-2 belongs to headless rank 2, not to rank 1 on worker-7.
    assert RESOLVER.resolve(_fault("worker-8", "Ascend910-2"), CLUSTER).ranks_by_instance() == {7: frozenset({2})}


def test_empty_npu_name_maps_every_rank_on_the_node_headless_included() -> None:
    result = RESOLVER.resolve(_fault("worker-8", ""), CLUSTER)
    assert result.ranks_by_instance() == {7: frozenset({2, 3})}
    on_7 = RESOLVER.resolve(_fault("worker-7", ""), CLUSTER)
    assert on_7.ranks_by_instance() == {7: frozenset({0, 1}), 9: frozenset({0, 1})}


def test_union_across_pods_of_one_instance_on_one_node() -> None:
    # Two pods of instance 5 on one host (the demo's loopback pods) both list "Ascend910-0".
    inst = _instance(5, [
        ("127.0.0.2", "host-a", [_ep(0, "127.0.0.2", ["Ascend910-0"]), _ep(1, "127.0.0.2", ["Ascend910-1"])]),
        ("127.0.0.3", "host-a", [_ep(2, "127.0.0.3", ["Ascend910-0"]), _ep(3, "127.0.0.3", ["Ascend910-3"])]),
    ])
    assert RESOLVER.resolve(_fault("host-a", "Ascend910-0"), [inst]).ranks_by_instance() == {5: frozenset({0, 2})}
    assert RESOLVER.resolve(_fault("host-a", ""), [inst]).ranks_by_instance() == {5: frozenset({0, 1, 2, 3})}


def test_endpoint_found_by_pod_ip_even_if_the_pod_does_not_list_it() -> None:
    inst = _instance(3, [("10.0.1.1", "n1", [_ep(0, "10.0.1.1", ["Ascend910-0"]), _ep(1, "10.0.1.1", ["Ascend910-1"])])],
                     listed={"10.0.1.1": [0]})
    assert RESOLVER.resolve(_fault("n1", "Ascend910-1"), [inst]).ranks_by_instance() == {3: frozenset({1})}


def test_node_without_our_pods_is_not_ours() -> None:
    result = RESOLVER.resolve(_fault("worker-99", "Ascend910-0"), CLUSTER)
    assert result.unmappable is Unmappable.NODE_NOT_OURS and result.ignored
    assert result.mappings == () and result.ranks_by_instance() == {}
    assert "worker-99" in result.detail


def test_no_instances_at_all_is_not_ours() -> None:
    assert RESOLVER.resolve(_fault("worker-7", "Ascend910-0"), []).unmappable is Unmappable.NODE_NOT_OURS


def test_unknown_card_name_format_is_not_guessed() -> None:
    for name in ("davinci-x", "ascend910-2", "Ascend910", "Ascend910-", "2", "Ascend910-2 ", "custom910-2", "npu-core-1"):
        result = RESOLVER.resolve(_fault("worker-7", name), CLUSTER)
        assert result.unmappable is Unmappable.UNKNOWN_CARD_FORMAT, name
        assert result.ranks_by_instance() == {}
        assert [(m.instance_id, m.reason) for m in result.mappings] == [
            (7, Unmappable.UNKNOWN_CARD_FORMAT), (9, Unmappable.UNKNOWN_CARD_FORMAT)
        ]
        assert repr(name) in result.detail and "not guessed" in result.detail


def test_other_ascend_models_are_known_formats() -> None:
    inst = _instance(1, [("10.0.2.1", "n2", [_ep(0, "10.0.2.1", ["Ascend310P-3"])])])
    assert RESOLVER.resolve(_fault("n2", "Ascend310P-3"), [inst]).ranks_by_instance() == {1: frozenset({0})}


# A5 pod: one pod, four ranks on npu-0..3 (device ids from the pod's huawei.com/AscendReal annotation).
A5 = _instance(2, [("10.0.6.1", "a5-node", [_ep(r, "10.0.6.1", [f"npu-{r}"]) for r in range(4)])])


def test_atlas_a5_card_names_map_to_their_rank() -> None:
    result = RESOLVER.resolve(_fault("a5-node", "npu-1"), [A5])
    assert result.unmappable is None and result.ranks_by_instance() == {2: frozenset({1})}


def test_a_virtual_npu_or_share_slice_fault_is_its_physical_card() -> None:
    # The device plugin's fault entry names the vNPU / slice; the rank holds physical card 1.
    for name in ("npu-2c-100-1", "npu-1-0", "npu-4c.3cpu-101-1_2"):
        assert RESOLVER.resolve(_fault("a5-node", name), [A5]).ranks_by_instance() == {2: frozenset({1})}, name


def test_an_engine_on_a_virtual_npu_is_hit_by_its_physical_card() -> None:
    inst = _instance(3, [("10.0.7.1", "v-node", [_ep(0, "10.0.7.1", ["Ascend910-2c-100-0_1"]),
                                                 _ep(1, "10.0.7.1", ["Ascend910-2c-101-1"])])])
    assert RESOLVER.resolve(_fault("v-node", "Ascend910-1"), [inst]).ranks_by_instance() == {3: frozenset({1})}
    assert RESOLVER.resolve(_fault("v-node", "Ascend910-0"), [inst]).ranks_by_instance() == {3: frozenset({0})}


def test_310p_mixed_insert_names() -> None:
    inst = _instance(4, [("10.0.8.1", "p-node", [_ep(0, "10.0.8.1", ["Ascend310P-V-3"]), _ep(1, "10.0.8.1", ["Ascend310P-IPro-4"])])])
    assert RESOLVER.resolve(_fault("p-node", "Ascend310P-V-3"), [inst]).ranks_by_instance() == {4: frozenset({0})}
    assert RESOLVER.resolve(_fault("p-node", "Ascend310P-IPro-4"), [inst]).ranks_by_instance() == {4: frozenset({1})}


def test_operator_prefix_is_known_once_configured() -> None:
    inst = _instance(5, [("10.0.9.1", "c-node", [_ep(0, "10.0.9.1", ["custom910-0"]), _ep(1, "10.0.9.1", ["custom910-1"])])])
    custom = TopologyResolver.from_config(HardwareMonitorConfig(card_name_prefixes=["custom910-"]))
    assert custom.resolve(_fault("c-node", "custom910-1"), [inst]).ranks_by_instance() == {5: frozenset({1})}
    # Without the configuration: not guessed.
    assert RESOLVER.resolve(_fault("c-node", "custom910-1"), [inst]).unmappable is Unmappable.UNKNOWN_CARD_FORMAT


def test_container_local_device_ids_cannot_answer() -> None:
    # An endpoint registered "0" (a container index) cannot tell whether the host's card is its own.
    inst = _instance(6, [("10.0.10.1", "l-node", [_ep(0, "10.0.10.1", ["0"]), _ep(1, "10.0.10.1", ["Ascend910-5"])])])
    result = RESOLVER.resolve(_fault("l-node", "Ascend910-0"), [inst])
    assert result.unmappable is Unmappable.TOPOLOGY_MISSING
    assert "device ids in no known card name form: endpoint 0 ['0']" in result.detail
    # A card another endpoint holds still maps.
    assert RESOLVER.resolve(_fault("l-node", "Ascend910-5"), [inst]).ranks_by_instance() == {6: frozenset({1})}


def test_card_on_our_node_that_no_endpoint_lists() -> None:
    result = RESOLVER.resolve(_fault("worker-7", "Ascend910-7"), CLUSTER)
    assert result.unmappable is Unmappable.CARD_NOT_FOUND
    assert [(m.instance_id, m.reason, m.ranks) for m in result.mappings] == [
        (7, Unmappable.CARD_NOT_FOUND, frozenset()), (9, Unmappable.CARD_NOT_FOUND, frozenset())
    ]


def test_topology_without_cards_cannot_answer() -> None:
    blind = _instance(4, [("10.0.3.1", "worker-7", [_ep(0, "10.0.3.1", []), _ep(1, "10.0.3.1", [])])])
    result = RESOLVER.resolve(_fault("worker-7", "Ascend910-7"), [INST7, blind])
    assert result.unmappable is Unmappable.TOPOLOGY_MISSING
    assert [(m.instance_id, m.reason) for m in result.mappings] == [(4, Unmappable.TOPOLOGY_MISSING)]
    # Instance 7's complete topology does not list the card: it is unaffected, not "not found".
    assert result.unaffected_instance_ids == (7,)
    assert "no device_infos" in result.mappings[0].detail
    # A node fault needs no cards.
    assert RESOLVER.resolve(_fault("worker-7", ""), [blind]).ranks_by_instance() == {4: frozenset({0, 1})}


def test_pod_listing_missing_endpoints() -> None:
    gap = _instance(6, [("10.0.4.1", "n4", [_ep(0, "10.0.4.1", ["Ascend910-0"])])], listed={"10.0.4.1": [0, 1]})
    card = RESOLVER.resolve(_fault("n4", "Ascend910-1"), [gap])
    assert card.unmappable is Unmappable.TOPOLOGY_MISSING and "[1]" in card.detail
    assert RESOLVER.resolve(_fault("n4", "Ascend910-0"), [gap]).ranks_by_instance() == {6: frozenset({0})}
    assert RESOLVER.resolve(_fault("n4", ""), [gap]).ranks_by_instance() == {6: frozenset({0, 1})}


def test_pod_without_any_endpoint_is_topology_missing_for_a_node_fault() -> None:
    empty = _instance(8, [("10.0.5.1", "n5", [])])
    result = RESOLVER.resolve(_fault("n5", ""), [empty])
    assert result.unmappable is Unmappable.TOPOLOGY_MISSING


def test_inactive_instance_is_mapped_but_flagged() -> None:
    inactive7 = InstanceTopology(INST7.topology, active=False)
    result = RESOLVER.resolve(_fault("worker-7", "Ascend910-2"), [inactive7, INST9])
    assert result.unmappable is Unmappable.INSTANCE_NOT_ACTIVE
    assert result.ranks_by_instance() == {}
    mapping = result.mapping(7)
    assert mapping is not None
    assert (mapping.ranks, mapping.active, mapping.reason) == (frozenset({1}), False, Unmappable.INSTANCE_NOT_ACTIVE)
    # A node fault hitting an active and an inactive instance maps the active one.
    both = RESOLVER.resolve(_fault("worker-7", ""), [inactive7, INST9])
    assert both.unmappable is None and both.ranks_by_instance() == {9: frozenset({0, 1})}
    assert both.mapping(7).reason is Unmappable.INSTANCE_NOT_ACTIVE


def test_identities_stay_apart() -> None:
    # The same code on two cards of one node, and one card+code on two nodes: four faults, four keys.
    faults = [
        _fault("worker-7", "Ascend910-2", ("80CB8002",)),
        _fault("worker-7", "Ascend910-5", ("80CB8002",)),
        _fault("worker-8", "Ascend910-3", ("80CB8002",)),
        _fault("worker-7", "Ascend910-0", ("80CB8002",)),
    ]
    results = RESOLVER.resolve_all(faults, CLUSTER)
    assert len(results) == 4
    assert results[(("80CB8002",), "Ascend910-2", "worker-7")].ranks_by_instance() == {7: frozenset({1})}
    assert results[(("80CB8002",), "Ascend910-5", "worker-7")].ranks_by_instance() == {9: frozenset({1})}
    assert results[(("80CB8002",), "Ascend910-3", "worker-8")].ranks_by_instance() == {7: frozenset({3})}
    assert results[(("80CB8002",), "Ascend910-0", "worker-7")].ranks_by_instance() == {7: frozenset({0})}


def test_resolve_all_accepts_a_one_shot_iterable() -> None:
    results = RESOLVER.resolve_all([_fault("worker-7", "Ascend910-2"), _fault("worker-8", "")], iter(CLUSTER))
    assert [r.ranks_by_instance() for r in results.values()] == [{7: frozenset({1})}, {7: frozenset({2, 3})}]


def test_describe_names_ranks_and_reasons() -> None:
    text = RESOLVER.resolve(_fault("worker-7", "Ascend910-2"), CLUSTER).describe()
    assert "instance=7 ranks=[1]" in text and "npu=Ascend910-2" in text
    assert "NODE_NOT_OURS" in RESOLVER.resolve(_fault("elsewhere"), CLUSTER).describe()


# --- properties over random topologies -----------------------------------------------------

_NODES = ["n0", "n1", "n2"]


@st.composite
def _topologies(draw):
    instances = []
    for instance_id in range(draw(st.integers(1, 3))):
        pods = []
        rank = 0
        for pod_index in range(draw(st.integers(1, 3))):
            ip = f"10.{instance_id}.{pod_index}.1"
            node = draw(st.sampled_from(_NODES))
            eps = []
            for _ in range(draw(st.integers(1, 3))):
                phys = draw(st.lists(st.integers(0, 7), max_size=2, unique=True))
                cards = [draw(st.sampled_from(_forms(i))) for i in phys]
                eps.append(_ep(rank, ip, cards, headless=draw(st.booleans())))
                rank += 1
            pods.append((ip, node, eps))
        instances.append(_instance(instance_id, pods))
    return instances


def _forms(phy: int) -> list[str]:
    """Names the device plugin publishes for physical card `phy` (physical, vNPU, share slice)."""
    return [f"Ascend910-{phy}", f"Ascend910-2c-10{phy}-{phy}", f"Ascend910-{phy}-1"]


def _phy(name: str) -> int:
    return int(name.split("-")[-1].split("_")[0]) if name.count("-") != 2 else int(name.split("-")[1])


@settings(max_examples=40, deadline=None)
@given(_topologies(), st.sampled_from(_NODES),
       st.one_of(st.just(""), st.integers(0, 7).flatmap(lambda i: st.sampled_from(_forms(i)))))
def test_mapped_ranks_are_exactly_the_ones_on_the_node_holding_the_card(instances, node, card) -> None:
    result = RESOLVER.resolve(_fault(node, card), instances)
    for inst in instances:
        pods = [p for p in inst.topology.pods if p.node_name == node]
        on_node = {r for p in pods for r in p.endpoint_ids}
        eps = {e.id: e for e in inst.topology.endpoints}
        expected = on_node if not card else {
            r for r in on_node if any(_phy(d.device_id) == _phy(card) for d in eps[r].device_infos)}
        mapping = result.mapping(inst.topology.id)
        got = mapping.ranks if mapping is not None else frozenset()
        assert got == frozenset(expected)
    if not any(p.node_name == node for inst in instances for p in inst.topology.pods):
        assert result.unmappable is Unmappable.NODE_NOT_OURS


def test_resolver_from_config_knows_the_operator_prefix() -> None:
    resolver = TopologyResolver.from_config(HardwareMonitorConfig(card_name_prefixes=["custom910-"]))
    assert resolver.is_known_card_name("custom910-3") and resolver.is_known_card_name("npu-3")
    assert not TopologyResolver().is_known_card_name("custom910-3")
