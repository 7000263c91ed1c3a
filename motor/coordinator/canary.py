"""The canary of the Controller's idle-fault probe: one one-token completion to one published endpoint
of an instance, bounded by its timeout, with what the engine answered. It bypasses the routing
choice (the probe names the endpoints it wants checked) and the outstanding counts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from motor.coordinator.engine_client import EngineClient, UpstreamError, describe_client_error
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.openai_format import REQUEST_ID_HEADER, error_detail
from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import RoutingTable

log = logging.getLogger(__name__)

CANARY_PROMPT = "motor canary"
MAX_CANARY_TIMEOUT_SEC = 30.0


@dataclass(frozen=True)
class CanaryResult:
    endpoint_id: int
    served: bool
    http_status: int
    detail: str
    duration_sec: float


class CanaryRefused(Exception):
    """A canary that cannot be sent; ``code`` is NOT_FOUND, FAILED_PRECONDITION or INVALID_ARGUMENT."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Canary:
    def __init__(self, table: RoutingTable, client: EngineClient, metrics: CoordinatorMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.client = client
        self.metrics = metrics
        self.clock = clock

    async def send(self, instance_id: int, endpoint_ids: list[int], timeout_sec: float,
                   request_id: str) -> CanaryResult:
        """One one-token completion to the first published, routable endpoint of ``endpoint_ids``."""
        if not 0 < timeout_sec <= MAX_CANARY_TIMEOUT_SEC:
            raise CanaryRefused("INVALID_ARGUMENT", f"timeout_sec {timeout_sec!r} not in (0, {MAX_CANARY_TIMEOUT_SEC:g}]")
        if not endpoint_ids:
            raise CanaryRefused("INVALID_ARGUMENT", "endpoint_ids is empty: name the endpoints that may take the canary")
        if not self.table.is_published(instance_id):
            raise CanaryRefused("NOT_FOUND", f"instance {instance_id} is not published")
        route = next((r for r in (self.table.route_to(instance_id, e) for e in endpoint_ids) if r is not None), None)
        if route is None:
            raise CanaryRefused("FAILED_PRECONDITION", f"none of the endpoints {sorted(endpoint_ids)} of instance "
                                                       f"{instance_id} is published and routable")
        body = json.dumps({"model": route.model, "prompt": CANARY_PROMPT, "max_tokens": 1}).encode()
        headers = {"Content-Type": "application/json", REQUEST_ID_HEADER: request_id}
        started = self.clock()
        status, detail, outcome = 0, "", "failed"
        try:
            async with asyncio.timeout(timeout_sec):
                async with self.client.post(route, "/v1/completions", body, headers) as resp:
                    status = resp.status
                    if status == 200:
                        await resp.read()
                        outcome, detail = "served", "served"
                    else:
                        detail = f"engine answered {status}{await error_detail(resp)}"
        except TimeoutError:
            outcome, detail = "timeout", f"no answer within {timeout_sec:g}s"
        except UpstreamError as exc:
            detail = exc.reason
        except (aiohttp.ClientError, OSError) as exc:
            detail = describe_client_error(exc)
        elapsed = self.clock() - started
        self.metrics.canaries.labels(outcome).inc()
        RequestLog(log, request_id, route).warning("canary %s in %.3fs: %s", outcome, elapsed, detail)
        return CanaryResult(route.rank, outcome == "served", status, detail, elapsed)
