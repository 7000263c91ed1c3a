"""MindCluster in the simulation: card and node faults, their truth, and their reports.

A `hardware_fault` event is a fault of one card (the card of a rank), of a whole node (every card
of a pod's node), or of a card or node no pod hosts (a card name in no known form on our node, a
card number no endpoint lists, a node of no pod). Its report goes through the real intake boundary,
the running Controller's ResourceMonitor RpcSource, as the ReportHardwareFault servicer hands it on.

The truth: a severe fault (the levels the Controller acts on, `levels.is_severe`: L4–L6) on a card
or node that hosts ranks kills those ranks' engines (the executor, or the whole process) `delay`
seconds apart from the report, before it (the software sees it first) or after it (the hardware
report comes first); a mild fault, and a fault no rank lives on, changes nothing.

MindCluster's ConfigMaps are level-triggered: a Controller that starts re-reads them (the
directory and Kubernetes sources), so a report made while no Controller runs (or before its
monitor started) is delivered to the next one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gen.motor.v1 import controller_pb2
from motor.controller.hardware.levels import CANONICAL_NAME, is_severe
from motor.controller.hardware.sources.rpc import SourceNotStarted
from motor.controller.model.runtime import FtPhase

# How often an owed report is tried again while no Controller takes it (a source's poll).
REDELIVER_INTERVAL_SEC = 0.1
# An owed report is given up after this long (bounds the loop; longer than any run).
REDELIVER_BOUND_SEC = 300.0
FAULT_CODE = "80E01801"


@dataclass(frozen=True)
class Delivered:
    """A report the Controller life `incarnation` took at `at_sec`, of a fault at `fault_at_sec`."""

    at_sec: float
    fault_at_sec: float
    incarnation: int
    ranks: frozenset[int]      # the ranks the fault's card or node hosts (empty: none of ours)
    severe: bool
    unmappable: bool           # on our node, but the card name cannot be mapped (RFC §4.2: original strategy)
    quiet: bool                # the instance was at rest: nothing else for the Controller to wait on


class HardwareModel:
    def __init__(self, world) -> None:
        self.world = world
        self.delivered: list[Delivered] = []

    def locate(self, event) -> tuple[str, str, frozenset[int]]:
        """(node_name, npu_name, ranks hosted) of the event's card or node."""
        w = self.world
        if event.target == "card":
            address = w.pod_of(event.rank)
            cfg = w.nm_configs[address]
            device = next(e.device_infos[0].device_id for e in cfg.engines if e.dp_rank == event.rank)
            return cfg.node_name, device, frozenset({event.rank})
        if event.target == "foreign_node":
            return f"node-{len(w.nm_configs) + 1}", "Ascend910-0", frozenset()
        cfg = w.nm_configs[w.pod_addresses[event.pod]]
        if event.target == "node":
            return cfg.node_name, "", frozenset(e.dp_rank for e in cfg.engines)
        if event.target == "foreign_card":
            return cfg.node_name, f"Ascend910-{len(cfg.engines) + 5}", frozenset()
        if event.target == "unknown_card_format":
            return cfg.node_name, "davinci-card#1", frozenset()
        raise ValueError(f"unknown hardware target {event.target!r}")

    async def fire(self, event) -> None:
        node, npu, ranks = self.locate(event)
        severe = is_severe(event.level)
        request = controller_pb2.ReportHardwareFaultRequest(
            node_name=node, npu_name=npu, fault_code=FAULT_CODE, level=event.level,
            fault_type="NodeUnhealthy" if not npu else "CardUnhealthy",
            fault_handling=CANONICAL_NAME[event.level], fault_time_unix_sec=self.world.clock.wall(), source="rpc")
        unmappable = severe and event.target == "unknown_card_format"
        fault_at = self.world.clock.monotonic()
        if not (severe and ranks):
            await self._deliver(request, fault_at, ranks, severe, unmappable)
            return
        if event.hardware_first:
            await self._deliver(request, fault_at, ranks, severe, unmappable)
            await asyncio.sleep(event.duration_sec)
            self._kill(ranks, event.kill)
        else:
            self._kill(ranks, event.kill)
            await asyncio.sleep(event.duration_sec)
            await self._deliver(request, fault_at, ranks, severe, unmappable)

    def _kill(self, ranks: frozenset[int], how: str) -> None:
        w = self.world
        for rank in sorted(ranks):
            engine = w.group.engines[rank]
            if how == "executor_death" and rank in w.group.members:
                w.executor_death(rank)
            elif engine.process_up:
                # Not in a formed group (forming, or relaunching): the lost card takes the process.
                w.kill_process(rank)
        w.note(f"hardware: the engines of ranks {sorted(ranks)} die ({how})")

    def _quiet(self) -> bool:
        w = self.world
        rt, core = w.runtime(), w.core
        if rt is None or core is None or w.strategy_running():
            return False
        record = core.registry.get(rt.instance_id)
        if record is None or not record.assembled:
            return False
        active = {r for r in rt.original_dp_ranks if r not in rt.dead_committed}
        return rt.phase in (FtPhase.NORMAL, FtPhase.SCALED_DOWN_RUNNING) and active == w.healthy_in_truth()

    async def _deliver(self, request, fault_at: float, ranks: frozenset[int], severe: bool, unmappable: bool) -> None:
        w = self.world
        started = w.clock.monotonic()
        owed = False
        while w.clock.monotonic() - started < REDELIVER_BOUND_SEC:
            core = w.core
            if core is not None:
                quiet = self._quiet()
                try:
                    await core.monitor.rpc.report(request)
                except SourceNotStarted:
                    pass
                else:
                    self.delivered.append(Delivered(w.clock.monotonic(), fault_at, w.incarnation, ranks, severe, unmappable,
                                                    quiet and not owed))
                    w.note(f"hardware: reported {request.node_name}/{request.npu_name or '<node>'} "
                           f"L{request.level}{' (owed, re-read by a new Controller)' if owed else ''}")
                    return
            owed = True
            await asyncio.sleep(REDELIVER_INTERVAL_SEC)
