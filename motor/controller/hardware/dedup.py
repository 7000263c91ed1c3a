"""Which faults of a re-read document are new or changed. Pure.

A source re-reads whole documents (a ConfigMap on every change, a directory on every poll); the
FaultManager should hear of a fault once, again only when it changes (new time: it happened again;
new level or handling: it was upgraded), and again after it cleared and came back.
"""

from __future__ import annotations

from collections.abc import Iterable

from motor.controller.hardware.model import FaultKey, HardwareFault

_Signature = tuple[int, float, str, str]


def _signature(fault: HardwareFault) -> _Signature:
    return (fault.level, fault.fault_time_unix_sec, fault.fault_handling, fault.fault_type)


class FaultDeduper:
    """Per document (a ConfigMap name, a node, a file): the faults it listed last time."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[FaultKey, _Signature]] = {}

    def update(self, doc_id: str, faults: Iterable[HardwareFault]) -> tuple[list[HardwareFault], list[FaultKey]]:
        """Replaces the document's faults; returns (new or changed faults, keys that cleared)."""
        before = self._seen.get(doc_id, {})
        now: dict[FaultKey, _Signature] = {}
        fresh: list[HardwareFault] = []
        for fault in faults:
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
