"""What every hardware-fault source shares: the callback type, the source protocol, and how one
parsed document becomes "new or changed" faults.

Kept apart from `hardware.monitor` so that the sources (`rpc`, `directory`, `kube_watch`) and the
monitor that assembles them depend on this module, never on each other.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from motor.controller.hardware.formats.names import ParseResult
from motor.controller.hardware.model import FaultKey, HardwareFault
from motor.controller.hardware.sources.dedup import FaultDeduper

log = logging.getLogger(__name__)

FaultCallback = Callable[[list[HardwareFault]], Awaitable[None] | None]


class HardwareFaultSource(Protocol):
    name: str

    async def start(self, on_faults: FaultCallback) -> None:
        """Begins delivering batches of new or changed faults; returns once running."""

    async def stop(self) -> None:
        """Stops delivering; idempotent, cancels its tasks and waits for them."""


async def call_fault_callback(on_faults: FaultCallback, faults: list[HardwareFault]) -> None:
    result = on_faults(faults)
    if inspect.isawaitable(result):
        await result


def log_cleared(keys: Sequence[FaultKey], source: str) -> None:
    for codes, npu, node in keys:
        log.info("hardware fault cleared node=%s npu=%s codes=%s source=%s", node, npu or "<node>", ",".join(codes) or "-", source)


def absorb(
    dedup: FaultDeduper, doc_key: str, result: ParseResult, source: str, where: str = "", now_sec: float | None = None
) -> list[HardwareFault]:
    """One re-read document → its new or changed faults; logs its problems and what cleared.

    `now_sec` stamps faults the document gives no time (see `dedup`).

    A document with problems and no fault at all is taken as unreadable, not as "all clear": its
    last known faults are kept (forgetting a real fault is worse than holding a stale one).
    """
    for problem in result.problems:
        log.warning("hardware: %s%s", where, problem)
    if not result.faults and result.problems:
        return []
    fresh, cleared = dedup.update(doc_key, result.faults, now_sec)
    log_cleared(cleared, source)
    return fresh
