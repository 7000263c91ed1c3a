"""What the source and monitor tests share: sample faults, a delivery sink, a settable clock, and a
KubeApi of plain dicts (scripted lists and watch streams, no cluster)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault
from motor.testing.waits import async_wait_for

LOST = HardwareFault("node-a", "Ascend910-2", ("80E18402",), levels.L6, "CardUnhealthy", "SeparateNPU", 1760000000.0)
RESET = HardwareFault("node-a", "Ascend910-5", ("80CB8002",), levels.L5, "CardUnhealthy", "RestartNPU", 1760000010.0)
OTHER = HardwareFault("node-b", "Ascend910-0", ("80CB8002",), levels.L5, "CardUnhealthy", "RestartNPU", 1760000020.0)
WAIT_SEC = 5.0


def fault_keys(faults: list[HardwareFault]) -> set[tuple[tuple[str, ...], str, str]]:
    return {f.key for f in faults}


class Sink:
    """Collects delivered batches; lets a test wait (bounded) for the next one."""

    def __init__(self) -> None:
        self.batches: list[list[HardwareFault]] = []
        self._event = asyncio.Event()

    def __call__(self, faults: list[HardwareFault]) -> None:
        self.batches.append(list(faults))
        self._event.set()

    @property
    def faults(self) -> list[HardwareFault]:
        return [f for batch in self.batches for f in batch]

    async def next_batch(self) -> list[HardwareFault]:
        self._event.clear()
        await asyncio.wait_for(self._event.wait(), WAIT_SEC)
        return self.batches[-1]


async def wait_until(predicate, what: str) -> None:
    """The shared bounded wait at this package's pace (WAIT_SEC, 10 ms polls)."""
    await async_wait_for(predicate, WAIT_SEC, what, interval_sec=0.01)


class FakeKubeApi:
    """KubeApi of plain dicts: scripted list results and watch streams, recorded calls."""

    def __init__(self) -> None:
        self.configmaps: list[dict[str, Any]] = []
        self.nodeinfos: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []
        self.cm_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.nodeinfo_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.node_watches: list[list[tuple[str, dict[str, Any]]]] = []
        self.calls: list[str] = []
        self.fail_next_list = 0
        self.stopped = threading.Event()

    def list_configmaps(self, namespace: str) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(f"list cm {namespace}")
        if namespace == "mindx-dl":
            return [c for c in self.nodeinfos], "300"
        if self.fail_next_list:
            self.fail_next_list -= 1
            raise ConnectionError("apiserver unreachable")
        return list(self.configmaps), "100"

    def watch_configmaps(self, namespace: str, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        if namespace == "mindx-dl":
            self.calls.append(f"watch nodeinfo {resource_version}")
            return self._stream(self.nodeinfo_watches)
        self.calls.append(f"watch cm {resource_version}")
        return self._stream(self.cm_watches)

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        self.calls.append("list nodes")
        return list(self.nodes), "200"

    def watch_nodes(self, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        self.calls.append(f"watch nodes {resource_version}")
        return self._stream(self.node_watches)

    def _stream(self, scripted: list[list[tuple[str, dict[str, Any]]]]) -> Iterator[tuple[str, dict[str, Any]]]:
        if scripted:
            yield from scripted.pop(0)
            return
        # Nothing scripted: a quiet watch that ends when stopped (or after a bound).
        self.stopped.wait(WAIT_SEC)

    def stop(self) -> None:
        self.stopped.set()


NODED = HardwareFault("node-a", "", ("0C000025",), levels.L6, "NodeDFault:CPU", "SeparateFault", 0.0)


class Clock:
    def __init__(self, now: float = 1760000000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
