"""The RFC §7 runtime as protobuf and as the JSON of GET /controller/fault_tolerance/status, and the
broadcaster behind WatchFaultToleranceStatus."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from gen.motor.v1 import common_pb2, controller_pb2
from motor.controller.fault_tolerance.runtime import FtRuntime
from motor.controller.fault_tolerance.timeline import Transaction

log = logging.getLogger(__name__)

_HEALTH_BY_NAME = {"healthy": common_pb2.ENGINE_HEALTH_HEALTHY, "unhealthy": common_pb2.ENGINE_HEALTH_UNHEALTHY,
                   "dead": common_pb2.ENGINE_HEALTH_DEAD}
_FT_BY_NAME = {"recovering": common_pb2.FT_STATE_RECOVERING, "failed": common_pb2.FT_STATE_FAILED}


def runtime_proto(runtime: FtRuntime) -> controller_pb2.InstanceFtRuntime:
    msg = controller_pb2.InstanceFtRuntime(
        instance_id=runtime.instance_id,
        phase=controller_pb2.FtPhase.Value(f"FT_PHASE_{runtime.phase}"),
        original_dp_ranks=list(runtime.original_dp_ranks),
        request_id=runtime.request_id,
        dead_committed=sorted(runtime.dead_committed),
        pending_removed_ranks=sorted(runtime.pending_removed_ranks),
        alive_dp_ranks=runtime.alive_dp_ranks,
        fallback_strategy=runtime.fallback_strategy,
        gate=controller_pb2.Gate(
            allowed=runtime.gate.allowed,
            reason_codes=[controller_pb2.GateReason.Value(f"GATE_REASON_{c}") for c in runtime.gate.reason_codes],
        ),
        serving_published=runtime.serving_published,
        can_serve=runtime.can_serve,
        generation=runtime.generation,
    )
    if runtime.last_error is not None:
        msg.last_error = runtime.last_error
    for rank, status in runtime.engine_statuses.items():
        entry = msg.engine_statuses[rank]
        entry.id = rank
        entry.status = _HEALTH_BY_NAME.get(str(status.get("status")), common_pb2.ENGINE_HEALTH_UNSPECIFIED)
        ft_state = status.get("ft_state")
        if ft_state:
            entry.ft_state = _FT_BY_NAME.get(str(ft_state), common_pb2.FT_STATE_UNKNOWN)
            entry.raw_ft_state = str(ft_state)
        for key in ("fault_info", "last_ft_request_id", "ft_error"):
            if status.get(key):
                setattr(entry, key, str(status[key]))
        entry.mask.extend(int(m) for m in status.get("mask", []) or [])  # type: ignore[union-attr]
    return msg


def transaction_proto(txn: Transaction) -> controller_pb2.Transaction:
    return controller_pb2.Transaction(
        request_id=txn.request_id,
        strategy=txn.strategy,
        started_at_unix_sec=txn.started_at_sec,
        ended_at_unix_sec=txn.ended_at_sec,
        outcome=txn.outcome,
        events=[
            controller_pb2.TimelineEvent(
                at_unix_sec=e.at_sec, kind=e.kind, name=e.name, target=e.target, outcome=e.outcome,
                detail=e.detail, duration_sec=e.duration_sec,
            )
            for e in txn.events
        ],
    )


class RuntimeBroadcaster:
    """Fan-out of runtime changes to watchers; a slow watcher loses intermediate states, never the last."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[int]] = set()

    def subscribe(self) -> asyncio.Queue[int]:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=256)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[int]) -> None:
        self._queues.discard(queue)

    def changed(self, instance_id: int) -> None:
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(instance_id)


def status_app(get_runtimes, get_timeline) -> web.Application:
    """GET /controller/fault_tolerance/status[?instance_id=N] and .../timeline?instance_id=N."""

    def _instance_filter(request: web.Request) -> int | None:
        raw = request.query.get("instance_id")
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise web.HTTPBadRequest(text=json.dumps({"detail": f"instance_id {raw!r} is not an integer"}),
                                     content_type="application/json") from None

    async def status(request: web.Request) -> web.Response:
        wanted = _instance_filter(request)
        runtimes = [r.as_dict() for r in get_runtimes() if wanted is None or r.instance_id == wanted]
        if wanted is not None and not runtimes:
            raise web.HTTPNotFound(text=json.dumps({"detail": f"unknown instance_id {wanted}"}), content_type="application/json")
        return web.json_response({"instances": runtimes})

    async def timeline(request: web.Request) -> web.Response:
        wanted = _instance_filter(request)
        if wanted is None:
            raise web.HTTPBadRequest(text=json.dumps({"detail": "instance_id is required"}), content_type="application/json")
        return web.json_response({"instance_id": wanted, "transactions": [t.as_dict() for t in get_timeline(wanted)]})

    app = web.Application()
    app.router.add_get("/controller/fault_tolerance/status", status)
    app.router.add_get("/controller/fault_tolerance/timeline", timeline)
    return app
