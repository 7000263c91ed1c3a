"""Mutable per-pod state shared by the services: the proxy switch and the retired endpoints.

Retired ids (committed by a scale-down) live in memory; they are filtered from the heartbeat,
fault reports and process-death reports, sent in RegisterRequest.retired_ids when the pod registers
again, and cleared for the ranks a lifecycle start/relaunch launches again. Only a StopPod outlives
the process: the agent retires the ranks of the stop record (`pod_stop`) before anything runs.

Joiners (an elastic scale-up's ranks, started with StartEngines join) stay retired, so the
heartbeat and the fault reports leave them out, until the round that started them commits; each is
kept with that round's request id (its abort stops them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger("nodemanager.pod_state")


class PodState:
    def __init__(self, instance_id: int, proxy_enabled: bool) -> None:
        self.instance_id = instance_id
        self.proxy_enabled = proxy_enabled
        self._retired: set[int] = set()
        self._joining: dict[int, str] = {}

    def set_proxy(self, enabled: bool, source: str) -> bool:
        """Adopts the proxy switch; True when it changed."""
        if enabled == self.proxy_enabled:
            return False
        log.warning("instance=%d DP scale-down proxy %s -> %s (from %s)", self.instance_id,
                    "on" if self.proxy_enabled else "off", "on" if enabled else "off", source)
        self.proxy_enabled = enabled
        return True

    @property
    def retired(self) -> frozenset[int]:
        return frozenset(self._retired)

    def is_retired(self, endpoint_id: int) -> bool:
        return endpoint_id in self._retired

    def retire(self, ids: Iterable[int]) -> list[int]:
        """Adds ``ids``; returns the newly retired ones (sorted)."""
        new = sorted(set(ids) - self._retired)
        self._retired.update(new)
        return new

    def unretire(self, ids: Iterable[int]) -> list[int]:
        back = sorted(self._retired & set(ids))
        self._retired.difference_update(back)
        for i in ids:
            self._joining.pop(i, None)
        return back

    @property
    def joining(self) -> frozenset[int]:
        return frozenset(self._joining)

    def is_joining(self, endpoint_id: int) -> bool:
        return endpoint_id in self._joining

    def join(self, ids: Iterable[int], request_id: str) -> None:
        """`ids` (retired) start as joiners of the scale-up `request_id`."""
        for i in ids:
            self._joining[i] = request_id

    def joiners_of(self, request_id: str) -> list[int]:
        return sorted(i for i, rid in self._joining.items() if rid == request_id)

    def end_join(self, ids: Iterable[int]) -> list[int]:
        """`ids` are joiners no more (stopped, or started otherwise); they stay retired."""
        gone = sorted(i for i in ids if i in self._joining)
        for i in gone:
            del self._joining[i]
        return gone

    def alive_for_heartbeat(self, running: Iterable[int]) -> list[int]:
        """With the proxy on: running − retired ("expected set exactly equal"); off: every running id."""
        running = sorted(set(running))
        if not self.proxy_enabled:
            return running
        return [i for i in running if i not in self._retired]
