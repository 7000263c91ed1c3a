"""Hardware fault → original DP ranks per instance (RFC §4.2). Pure.

Rules:
- The pods of an instance on the fault's node are found by `Pod.node_name`; the candidate
  endpoints are those the pods list (`Pod.endpoint_ids`) and those whose `ip` is one of their
  `pod_ip`s. The endpoint id is the original DP rank.
- A card fault maps to the candidates whose `device_infos[].device_id` names the same physical card
  as `npu_name` (`formats.card_names`: every form the device plugin publishes — `Ascend910-3`, `npu-3`,
  `Ascend310P-3`, `Ascend310P-V-3`, an operator's prefix, the vNPU `Ascend910-2c-100-3`, the share
  slice `Ascend910-3-1` — stands for card 3 of its node); the result is the union over all the
  instance's pods on that node. The device ids are the host's card names (the pod's
  `huawei.com/AscendReal` annotation, checked by the NodeManager), never container-local indices.
- An empty `npu_name` (node fault: NodeD, the switch, Node NotReady) maps to every candidate rank,
  headless ones included.
- A card name in none of those forms is not guessed: UNKNOWN_CARD_FORMAT, and the FaultManager
  keeps the original strategy. An endpoint whose device id is in no known form cannot answer
  either: TOPOLOGY_MISSING (unless another endpoint holds the card).
- A node hosting no pod of any instance is not ours: NODE_NOT_OURS (ignore).
- Identities stay apart: each fault is resolved on its own, keyed by (fault codes, npu_name, node);
  `resolve_all` never merges two cards that share a fault code.

The resolver reports; it never decides. Whether an unmappable fault means "original strategy" or
"ignore" is the FaultManager's call, with the reason given here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gen.motor.v1 import common_pb2
from motor.controller.hardware.formats.card_names import DEFAULT_CARD_NAMES, CardName, CardNames
from motor.controller.hardware.model import FaultKey, HardwareFault

if TYPE_CHECKING:
    from motor.controller.config import HardwareMonitorConfig


class Unmappable(str, enum.Enum):
    NODE_NOT_OURS = "NODE_NOT_OURS"
    UNKNOWN_CARD_FORMAT = "UNKNOWN_CARD_FORMAT"
    # A well-formed card on our node that no endpoint of any instance there lists.
    CARD_NOT_FOUND = "CARD_NOT_FOUND"
    # The instance's topology on that node cannot answer (no endpoints, or endpoints without cards).
    TOPOLOGY_MISSING = "TOPOLOGY_MISSING"
    # Mapped, but the instance is not ACTIVE: no correlation wait, original strategy (RFC §4.2).
    INSTANCE_NOT_ACTIVE = "INSTANCE_NOT_ACTIVE"


# When no instance maps, the result names the most telling reason present, in this order.
_OVERALL_ORDER = (
    Unmappable.UNKNOWN_CARD_FORMAT,
    Unmappable.TOPOLOGY_MISSING,
    Unmappable.INSTANCE_NOT_ACTIVE,
    Unmappable.CARD_NOT_FOUND,
)


@dataclass(frozen=True)
class InstanceTopology:
    """What the resolver needs of an instance: its authoritative topology and whether it is ACTIVE."""

    topology: common_pb2.Instance
    active: bool


@dataclass(frozen=True)
class InstanceMapping:
    instance_id: int
    ranks: frozenset[int]
    active: bool
    # None: the fault maps completely to `ranks` of an active instance.
    reason: Unmappable | None
    detail: str = ""

    @property
    def mapped(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class ResolveResult:
    fault: HardwareFault
    # Instances with pods on the node that the fault touches or cannot be told apart from; sorted by id.
    mappings: tuple[InstanceMapping, ...]
    # None when at least one instance mapped completely; else why nothing did.
    unmappable: Unmappable | None
    detail: str = ""
    # Instances on the node that the card does not belong to.
    unaffected_instance_ids: tuple[int, ...] = ()

    @property
    def key(self) -> FaultKey:
        return self.fault.key

    @property
    def ignored(self) -> bool:
        """Not our node: nothing to do."""
        return self.unmappable is Unmappable.NODE_NOT_OURS

    def ranks_by_instance(self) -> dict[int, frozenset[int]]:
        """Completely mapped, active instances → their original DP ranks hit by the fault."""
        return {m.instance_id: m.ranks for m in self.mappings if m.mapped}

    def mapping(self, instance_id: int) -> InstanceMapping | None:
        return next((m for m in self.mappings if m.instance_id == instance_id), None)

    def describe(self) -> str:
        parts = [
            f"instance={m.instance_id} ranks={sorted(m.ranks)}" + (f" ({m.reason.value}: {m.detail})" if m.reason else "")
            for m in self.mappings
        ]
        head = f"{self.fault.describe()} → "
        if self.unmappable is not None and not parts:
            return head + f"{self.unmappable.value}: {self.detail}"
        return head + "; ".join(parts) + (f" [{self.unmappable.value}]" if self.unmappable else "")


class TopologyResolver:
    def __init__(self, card_names: CardNames = DEFAULT_CARD_NAMES) -> None:
        self.card_names = card_names

    @classmethod
    def from_config(cls, config: HardwareMonitorConfig) -> TopologyResolver:
        """MindCluster's prefixes plus `hardware_monitor.card_name_prefixes`."""
        return cls(CardNames(config.card_name_prefixes))

    def is_known_card_name(self, npu_name: str) -> bool:
        return self.card_names.parse(npu_name) is not None

    def resolve(self, fault: HardwareFault, instances: Iterable[InstanceTopology]) -> ResolveResult:
        on_node = [
            (inst, [pod for pod in inst.topology.pods if pod.node_name == fault.node_name])
            for inst in sorted(instances, key=lambda i: i.topology.id)
        ]
        on_node = [(inst, pods) for inst, pods in on_node if pods]
        if not on_node:
            return ResolveResult(
                fault, (), Unmappable.NODE_NOT_OURS, f"no pod of any instance runs on node {fault.node_name}"
            )
        card = self.card_names.parse(fault.npu_name) if fault.npu_name else None
        if fault.npu_name and card is None:
            detail = f"card name {fault.npu_name!r} is not {self.card_names.describe_forms()}; not guessed"
            mappings = tuple(
                InstanceMapping(inst.topology.id, frozenset(), inst.active, Unmappable.UNKNOWN_CARD_FORMAT, detail)
                for inst, _ in on_node
            )
            return ResolveResult(fault, mappings, Unmappable.UNKNOWN_CARD_FORMAT, detail)

        mappings: list[InstanceMapping] = []
        unaffected: list[int] = []
        not_found: list[InstanceTopology] = []
        for inst, pods in on_node:
            outcome = _map_instance(fault, card, inst, pods, self.card_names)
            if outcome is None:
                not_found.append(inst)
            else:
                mappings.append(outcome)
        if mappings:
            # Some instance holds the card, or might (its topology has gaps): the others, whose
            # complete topology does not list it, are unaffected.
            unaffected = [inst.topology.id for inst in not_found]
        else:
            # Nobody on the node lists the card: every instance there is told, none is guessed.
            detail = f"no endpoint on node {fault.node_name} lists card {fault.npu_name}"
            mappings += [
                InstanceMapping(inst.topology.id, frozenset(), inst.active, Unmappable.CARD_NOT_FOUND, detail)
                for inst in not_found
            ]
        mappings.sort(key=lambda m: m.instance_id)
        if any(m.mapped for m in mappings):
            return ResolveResult(fault, tuple(mappings), None, "", tuple(unaffected))
        reasons = {m.reason for m in mappings}
        overall = next(r for r in _OVERALL_ORDER if r in reasons)
        detail = next(m.detail for m in mappings if m.reason is overall)
        return ResolveResult(fault, tuple(mappings), overall, detail, tuple(unaffected))

    def resolve_all(
        self, faults: Iterable[HardwareFault], instances: Iterable[InstanceTopology]
    ) -> dict[FaultKey, ResolveResult]:
        """Each fault on its own, keyed by its identity; a repeated identity keeps its last report."""
        snapshot = list(instances)
        return {fault.key: self.resolve(fault, snapshot) for fault in faults}


def _map_instance(
    fault: HardwareFault, card: CardName | None, inst: InstanceTopology, pods: list[common_pb2.Pod],
    card_names: CardNames,
) -> InstanceMapping | None:
    """The instance's ranks on the node hit by the fault; None when the card is not the instance's."""
    topo = inst.topology
    pod_ips = {pod.pod_ip for pod in pods if pod.pod_ip}
    listed_ids = {rank for pod in pods for rank in pod.endpoint_ids}
    by_id = {ep.id: ep for ep in topo.endpoints}
    candidates = {ep.id: ep for ep in topo.endpoints if ep.ip in pod_ips or ep.id in listed_ids}
    missing_ids = sorted(listed_ids - set(by_id))
    where = f"instance {topo.id} on node {fault.node_name} (pods {sorted(pod_ips)})"

    def outcome(ranks: frozenset[int]) -> InstanceMapping:
        if not inst.active:
            return InstanceMapping(topo.id, ranks, False, Unmappable.INSTANCE_NOT_ACTIVE, f"instance {topo.id} is not active")
        return InstanceMapping(topo.id, ranks, True, None)

    if not fault.npu_name:
        ranks = frozenset(candidates) | frozenset(listed_ids)
        if not ranks:
            return InstanceMapping(topo.id, frozenset(), inst.active, Unmappable.TOPOLOGY_MISSING, f"{where}: no endpoints")
        return outcome(ranks)

    assert card is not None
    matched: set[int] = set()
    unknown_ids: dict[int, list[str]] = {}
    for ep in candidates.values():
        for device in ep.device_infos:
            held = card_names.parse(device.device_id)
            if held is None:
                unknown_ids.setdefault(ep.id, []).append(device.device_id)
            elif held.same_card(card):
                matched.add(ep.id)
    if matched:
        return outcome(frozenset(matched))
    without_cards = sorted(ep.id for ep in candidates.values() if not ep.device_infos)
    if missing_ids or without_cards or unknown_ids or not candidates:
        gaps = []
        if not candidates:
            gaps.append("no endpoints")
        if missing_ids:
            gaps.append(f"endpoints {missing_ids} listed by its pods are missing")
        if without_cards:
            gaps.append(f"endpoints {without_cards} report no device_infos")
        if unknown_ids:
            gaps.append("device ids in no known card name form: "
                        + ", ".join(f"endpoint {rank} {ids!r}" for rank, ids in sorted(unknown_ids.items())))
        return InstanceMapping(
            topo.id, frozenset(), inst.active, Unmappable.TOPOLOGY_MISSING,
            f"{where}: cannot tell whether card {fault.npu_name} is its own: " + ", ".join(gaps),
        )
    return None
