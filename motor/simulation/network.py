"""The simulated network between the services: per call a delay, a lost request or a lost answer
(the call then fails UNAVAILABLE; the effect of a lost answer stays), a duplicate delivery of the
idempotent NodeManager → Controller calls, and peers that are down."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc


class CallFailed(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details

    def rpc_error(self) -> grpc.aio.AioRpcError:
        """What a gRPC client raises for this failure."""
        return grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), self.details)


@dataclass
class NetworkBounds:
    delay_max_sec: float = 0.05
    loss: float = 0.0
    duplicate: float = 0.0


class Network:
    def __init__(self, rng: random.Random, bounds: NetworkBounds) -> None:
        self.rng, self.bounds = rng, bounds
        self.down: set[str] = set()
        self._extra: set[asyncio.Task[object]] = set()

    async def call(self, target: str, fn: Callable[[], Awaitable[object]], timeout_sec: float,
                   idempotent: bool = False):
        b = self.bounds
        await asyncio.sleep(self.rng.uniform(0.0005, b.delay_max_sec))
        if target in self.down:
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, f"{target} is down")
        if self.rng.random() < b.loss:
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, "request lost")
        if idempotent and self.rng.random() < b.duplicate:
            task = asyncio.get_running_loop().create_task(self._again(fn))
            self._extra.add(task)
            task.add_done_callback(self._extra.discard)
        try:
            result = await asyncio.wait_for(fn(), timeout_sec)
        except TimeoutError:
            raise CallFailed(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout_sec:g}s") from None
        await asyncio.sleep(self.rng.uniform(0.0005, b.delay_max_sec))
        if self.rng.random() < b.loss:
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, "answer lost")
        return result

    async def _again(self, fn) -> None:
        await asyncio.sleep(self.rng.uniform(0.0005, self.bounds.delay_max_sec * 4))
        try:
            await fn()
        except Exception:  # noqa: BLE001 - a duplicate's outcome is nobody's
            pass
