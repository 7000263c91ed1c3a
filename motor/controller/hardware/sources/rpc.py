"""RpcSource: what the Controller's ReportHardwareFault servicer calls (validate, then deliver)."""

from __future__ import annotations

import time
from collections.abc import Callable

from gen.motor.v1 import controller_pb2
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.base import FaultCallback, call_fault_callback


class SourceNotStarted(RuntimeError):
    """A report arrived before the monitor was started (the servicer answers UNAVAILABLE)."""


class RpcSource:
    """ReportHardwareFault: every valid report is delivered (the caller decided it is news)."""

    name = "rpc"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._on_faults: FaultCallback | None = None

    async def start(self, on_faults: FaultCallback) -> None:
        self._on_faults = on_faults

    async def stop(self) -> None:
        self._on_faults = None

    async def report(self, request: controller_pb2.ReportHardwareFaultRequest) -> HardwareFault:
        """Validates and delivers; raises HardwareFaultError (INVALID_ARGUMENT) or SourceNotStarted.

        Errors of the callback propagate, so the servicer can answer them instead of losing them.
        """
        fault = HardwareFault.from_request(request, now_sec=self._clock())
        on_faults = self._on_faults
        if on_faults is None:
            raise SourceNotStarted(f"hardware monitor is not running; report {fault.describe()} not taken")
        await call_fault_callback(on_faults, [fault])
        return fault
