"""Which faults of a re-read document are new or changed. Pure.

A source re-reads whole documents (a ConfigMap on every change, a directory on every poll); the
FaultManager should hear of a fault once, again only when it changes (new time: it happened again;
new level or handling: it was upgraded), and again after it cleared and came back.

A fault whose document gives no time (fault time 0: the card lists, ManuallySeparateNPU, NodeD, a
2023 entry) is stamped with the time the source first saw it (`now_sec`), and keeps that stamp for
as long as the document lists it: so it is news once per appearance, and a card reset again after it
recovered is news again (a bare 0 would look like the same fault forever).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from motor.controller.hardware.model import FaultKey, HardwareFault

_Signature = tuple[int, float, str, str]


def _signature(fault: HardwareFault) -> _Signature:
    return (fault.level, fault.fault_time_unix_sec, fault.fault_handling, fault.fault_type)


class FaultDeduper:
    """Per document (a ConfigMap name, a node, a file): the faults it listed last time."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[FaultKey, _Signature]] = {}

    def update(
        self, doc_id: str, faults: Iterable[HardwareFault], now_sec: float | None = None
    ) -> tuple[list[HardwareFault], list[FaultKey]]:
        """Replaces the document's faults; returns (new or changed faults, keys that cleared).

        With `now_sec`, faults without a time of their own are stamped (first sighting, kept).
        """
        before = self._seen.get(doc_id, {})
        now: dict[FaultKey, _Signature] = {}
        fresh: list[HardwareFault] = []
        for fault in faults:
            if fault.fault_time_unix_sec == 0.0 and now_sec is not None:
                known = before.get(fault.key)
                fault = dataclasses.replace(fault, fault_time_unix_sec=known[1] if known else now_sec)
            sig = _signature(fault)
            now[fault.key] = sig
            if before.get(fault.key) != sig:
                fresh.append(fault)
        cleared = [key for key in before if key not in now]
        if now:
            self._seen[doc_id] = now
        else:
            self._seen.pop(doc_id, None)
        return fresh, cleared

    def forget(self, doc_id: str) -> list[FaultKey]:
        """The document is gone; returns the keys it had (now cleared)."""
        return list(self._seen.pop(doc_id, {}))

    def documents(self) -> list[str]:
        return sorted(self._seen)
