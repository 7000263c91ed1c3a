"""Idle-fault probe (opt-in, beyond the RFC: `fault_tolerance_config.idle_fault_probe`).

A rank that dies while its instance is idle leaves the survivors HEALTHY: they run no collective, so
nothing fails. The snapshot stays incomplete and the RFC waits for the collection timeout, then
reconfigures the whole instance. With the probe on, while the decision is WAIT with a DEAD rank and
survivors without evidence, the Controller asks the Coordinator (SendCanary) for a one-token request
to one such survivor. Serving it makes the DP group step: the collective with the dead peer fails,
the survivors turn UNHEALTHY, the snapshot completes and the instance scales down.

Bounded: at most one canary in flight per instance, each within `idle_fault_probe_timeout_sec`; the
next one only after the previous canary's target has reported evidence while other survivors still
have none (when the dead rank held the DP store, only the canaried survivor notices), and that
evidence is `settle_sec` old: the survivors of one failed collective turn unhealthy together, and
their verdicts reach the Controller within one snapshot pull of the target's, so a second canary in
between would only race them; never the same survivor twice in one collection window. A canary that is served (the group stepped without a fault)
ends the probing: the RFC's timeout decides. Each canary is a `canary` call in the timeline of the
transaction that ends the window, and counted in `idle_fault_probes` of the runtime.

`next_candidates` is the pure policy; `IdleProbe` runs it and the calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from motor.controller.clients import PeerCallError
from motor.controller.fault_tolerance.decision import Decision, WaitKind
from motor.controller.fault_tolerance.evidence import RankEvidence
from motor.controller.fault_tolerance.strategy.base import ControllerDeps

log = logging.getLogger(__name__)


def next_candidates(*, active: Iterable[int], dead: Iterable[int], with_evidence: Iterable[int],
                    probed: list[int], routable: Iterable[int], served: bool, settling: bool = False) -> list[int]:
    """The survivors the next canary may go to, in order of preference; empty: no canary now.
    `settling`: the last canary's target reported less than the settle time ago."""
    dead_set, seen = set(dead), set(with_evidence)
    if not dead_set or served:
        return []
    if probed and (probed[-1] not in seen or settling):
        return []  # the last canary's effect is not known yet, or its peers' verdicts may still be on the way
    quiet = sorted((set(active) - dead_set - seen) & set(routable))
    return [rank for rank in quiet if rank not in probed]


@dataclass(frozen=True)
class ProbeRecord:
    """One canary, as the timeline shows it."""

    at_wall_sec: float
    duration_sec: float
    target: str
    candidates: tuple[int, ...]
    endpoint_id: int  # -1 when the Coordinator sent nothing
    outcome: str  # "served", "engine_failed", "timeout", or "error"
    detail: str
    request_id: str


@dataclass
class _Window:
    started_sec: float
    probed: list[int] = field(default_factory=list)
    served: bool = False
    records: list[ProbeRecord] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    # When the next canary may go (monotonic): the last target's evidence plus the settle time.
    due_sec: float | None = None


class IdleProbe:
    def __init__(self, deps: ControllerDeps) -> None:
        self._deps = deps
        self._windows: dict[int, _Window] = {}
        self.sent = 0

    @property
    def settle_sec(self) -> float:
        """Two snapshot pulls, or, with pulls off, one and a half NodeManager polls."""
        pull = self._deps.config.snapshot_pull_interval_sec
        return 2 * pull if pull > 0 else 1.5 * self._deps.config.fault_tolerance_config.engine_status_poll_interval_sec

    def deadlines(self) -> list[float]:
        """When a held-back canary becomes due: the strategy centre evaluates again then."""
        return [w.due_sec for w in self._windows.values()
                if w.due_sec is not None and (w.task is None or w.task.done())]

    @property
    def enabled(self) -> bool:
        ft = self._deps.config.fault_tolerance_config
        return ft.idle_fault_probe and ft.enable_fault_tolerance and ft.enable_dp_scale_down

    def consider(self, instance_id: int, decision: Decision, window_started_sec: float | None,
                 evidence: Mapping[int, RankEvidence], active: frozenset[int]) -> None:
        """Called for every WAIT decision; starts at most one canary."""
        if not self.enabled or decision.wait_kind is not WaitKind.EVIDENCE or window_started_sec is None:
            return
        client = self._deps.pusher.coordinator
        if client is None:
            return
        window = self._windows.get(instance_id)
        if window is None or window.started_sec != window_started_sec:
            if window is not None and window.task is not None and not window.task.done():
                return  # the old window's canary is still out
            window = self._windows[instance_id] = _Window(window_started_sec)
            self._deps.runtimes.set_idle_fault_probes(instance_id, 0)
        if window.task is not None and not window.task.done():
            return
        record = self._deps.registry.get(instance_id)
        if record is None:
            return
        endpoints = record.endpoint_infos()
        last = evidence.get(window.probed[-1]) if window.probed else None
        due = None if last is None else last.received_mono_sec + self.settle_sec
        settling = due is not None and self._deps.clock.monotonic() < due
        window.due_sec = due if settling else None
        candidates = next_candidates(active=active, dead=decision.dead, with_evidence=evidence,
                                     probed=window.probed, routable=[r for r, e in endpoints.items() if not e.headless],
                                     served=window.served, settling=settling)
        if not candidates:
            return
        request_id = f"probe-{instance_id}-{self._deps.new_id()}"
        window.probed.append(candidates[0])  # provisional: the Coordinator names the one it used
        window.task = asyncio.create_task(self._send(instance_id, window, candidates, request_id),
                                          name=f"idle-probe-{instance_id}")

    async def _send(self, instance_id: int, window: _Window, candidates: list[int], request_id: str) -> None:
        deps = self._deps
        client = deps.pusher.coordinator
        assert client is not None
        timeout = deps.config.fault_tolerance_config.idle_fault_probe_timeout_sec
        wall, start = deps.clock.wall(), deps.clock.monotonic()
        log.warning("instance=%d request_id=%s idle-fault probe: a rank is dead while survivors %s stay healthy; "
                    "sending a canary", instance_id, request_id, candidates)
        try:
            answer = await client.send_canary(instance_id, candidates, timeout, request_id)
        except PeerCallError as exc:
            outcome, detail, endpoint = "error", str(exc), -1
        else:
            endpoint = answer.endpoint_id
            window.probed[-1] = endpoint
            if answer.served:
                outcome = "served"
                window.served = True
            else:
                outcome = "timeout" if answer.http_status == 0 and "within" in answer.detail else "engine_failed"
            detail = f"endpoint {endpoint}: {answer.detail}"
        self.sent += 1
        window.records.append(ProbeRecord(wall, deps.clock.monotonic() - start, client.address, tuple(candidates),
                                          endpoint, outcome, detail, request_id))
        deps.runtimes.set_idle_fault_probes(instance_id, len(window.records))
        deps.changed(instance_id)
        log.warning("instance=%d request_id=%s idle-fault probe canary %s: %s", instance_id, request_id, outcome,
                    detail)

    def take(self, instance_id: int) -> list[ProbeRecord]:
        """The canaries of the instance's current window, handed to the transaction that ends it."""
        window = self._windows.get(instance_id)
        if window is None:
            return []
        records, window.records = window.records, []
        return records

    async def close(self) -> None:
        tasks = [w.task for w in self._windows.values() if w.task is not None and not w.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
