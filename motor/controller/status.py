"""The RFC §7 runtime as protobuf and as the JSON of GET /controller/fault_tolerance/status, and the
broadcaster behind WatchFaultToleranceStatus."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.internal import type_checkers
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from gen.motor.v1 import controller_pb2
from motor.common.metrics_http import add_metrics_route
from motor.controller.fault_tolerance.timeline import gate_reason_proto, phase_proto
from motor.controller.model.runtime import FtRuntime

log = logging.getLogger(__name__)

STATUS_MAX_BODY_BYTES = 64 * 1024


def runtime_proto(runtime: FtRuntime) -> controller_pb2.InstanceFtRuntime:
    msg = controller_pb2.InstanceFtRuntime(
        instance_id=runtime.instance_id,
        phase=phase_proto(runtime.phase),
        original_dp_ranks=list(runtime.original_dp_ranks),
        request_id=runtime.request_id,
        dead_committed=sorted(runtime.dead_committed),
        pending_removed_ranks=sorted(runtime.pending_removed_ranks),
        alive_dp_ranks=runtime.alive_dp_ranks,
        fallback_strategy=runtime.fallback_strategy,
        gate=controller_pb2.Gate(
            allowed=runtime.gate.allowed,
            reason_codes=[gate_reason_proto(c) for c in runtime.gate.reason_codes],
        ),
        serving_published=runtime.serving_published,
        can_serve=runtime.can_serve,
        generation=runtime.generation,
        reconfiguration_attempts=runtime.reconfiguration_attempts,
        reconfiguration_gave_up=runtime.reconfiguration_gave_up,
        migrated_requests=runtime.migrated_requests,
        idle_fault_probes=runtime.idle_fault_probes,
        capacity_restore=runtime.capacity_restore,
        restore_waiting_for=runtime.restore_waiting_for,
        restore_unplaced_ranks=list(runtime.restore_unplaced_ranks),
        restore_request_id=runtime.restore_request_id,
    )
    if runtime.last_error is not None:
        msg.last_error = runtime.last_error
    for rank, status in runtime.engine_statuses.items():
        msg.engine_statuses[rank].CopyFrom(status)
    return msg


_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})
_ENUM_NAMES: dict[str, dict[int, str]] = {}


def _enum_prefix(enum: EnumDescriptor) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


def _enum_names(enum: EnumDescriptor) -> dict[int, str]:
    """Number → name without the type prefix, once per enum type."""
    names = _ENUM_NAMES.get(enum.full_name)
    if names is None:
        prefix = _enum_prefix(enum)
        names = _ENUM_NAMES[enum.full_name] = {v.number: v.name.removeprefix(prefix) for v in enum.values}
    return names


def _json_value(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return _json_message(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        return _enum_names(field.enum_type).get(value, value)
    if kind in _FLOAT_TYPES:
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return type_checkers.ToShortestFloat(value) if kind == FieldDescriptor.TYPE_FLOAT else value
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def _map_key(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _json_message(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        name = field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[name] = {_map_key(k): _json_value(value_field, v) for k, v in getattr(msg, name).items()}
        elif field.is_repeated:
            out[name] = [_json_value(field, v) for v in getattr(msg, name)]
        elif field.has_presence and not msg.HasField(name):
            # Only fields with presence are left out; the JSON says null for them (RFC §7 "last_error": null).
            out[name] = None
        else:
            out[name] = _json_value(field, getattr(msg, name))
    return out


def message_json(msg: Message) -> dict[str, Any]:
    """The one JSON rendering of Motor's messages for the HTTP pages: protobuf's own JSON mapping with
    proto field names and every field present, then enum values without their type prefix
    ("SCALED_DOWN_RUNNING"), 64-bit integers as numbers, and unset optional fields as null.

    Rendered in one walk over the message: json_format's MessageToDict plus a second pass over its
    output is too slow on the Controller's loop for pages of thousands of engine statuses."""
    return _json_message(msg)


class RuntimeBroadcaster:
    """Fan-out of runtime changes to watchers; a slow watcher loses intermediate states, never the last.
    Keeps when each instance last changed, so that a watcher is told when its state came about, not
    when the watcher got round to sending it."""

    def __init__(self, on_change: Callable[[int], None] = lambda instance_id: None,
                 wall: Callable[[], float] = time.time) -> None:
        """`on_change`: called synchronously on every change (the metrics' runtime gauges), before the
        watchers. `wall`: the clock of the change times (seconds since the Unix epoch)."""
        self._queues: set[asyncio.Queue[int]] = set()
        self._on_change = on_change
        self._wall = wall
        self._changed_at: dict[int, float] = {}

    def subscribe(self) -> asyncio.Queue[int]:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=256)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[int]) -> None:
        self._queues.discard(queue)

    def changed(self, instance_id: int) -> None:
        self._changed_at[instance_id] = self._wall()
        self._on_change(instance_id)
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(instance_id)


    def changed_at(self, instance_id: int) -> float:
        """When the instance's runtime last changed; now when it has not changed in this process."""
        at = self._changed_at.get(instance_id)
        return self._wall() if at is None else at


class RuntimeJsonCache:
    """Each instance's runtime JSON text as last rendered, keyed by the message's serialized bytes: an
    instance unchanged since the last page is neither walked nor encoded again (after a round every
    rank's engine status is in its instance's runtime, and encoding a page of thousands of them took
    most of the page's time), and any change in any field renders it anew, since the key is the
    whole content. Holds one entry per instance; a page of every instance drops the ones gone.
    Pages render in worker threads, so two may use it at once: each step is one dict operation."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[bytes, str]] = {}

    def texts(self, protos: list[controller_pb2.InstanceFtRuntime], every: bool) -> list[str]:
        out = []
        for proto in protos:
            key = proto.SerializeToString(deterministic=True)
            entry = self._entries.get(proto.instance_id)
            if entry is None or entry[0] != key:
                entry = self._entries[proto.instance_id] = (key, json.dumps(message_json(proto)))
            out.append(entry[1])
        if every and len(self._entries) > len(protos):
            live = {p.instance_id for p in protos}
            for gone in [iid for iid in list(self._entries) if iid not in live]:
                self._entries.pop(gone, None)
        return out


def status_page_text(head: dict[str, Any], instances: list[str], tail: dict[str, Any]) -> str:
    """`json.dumps({**head, "instances": [...], **tail})` with each instance's JSON text (from
    `RuntimeJsonCache`) spliced in as it was rendered."""
    members = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    members.append('"instances": [' + ", ".join(instances) + "]")
    members += [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in tail.items()]
    return "{" + ", ".join(members) + "}"


async def _render_off_loop(render: Callable[[], str]) -> web.Response:
    """A page of messages the loop already copied, rendered in a worker thread: a page of thousands of
    engine statuses then holds the event loop only in GIL slices, so heartbeats and rounds are not
    queued behind it."""
    return web.Response(text=await asyncio.to_thread(render), content_type="application/json")


def status_app(get_runtimes, get_timeline, scale_down_enabled: bool,
               registry: CollectorRegistry | None = None, leadership=None, publishers=None) -> web.Application:
    """GET /controller/fault_tolerance/status[?instance_id=N] and .../timeline?instance_id=N (and, given
    a registry, GET /metrics).

    With the total switch or scale-down off the page says `"phase": "DISABLED"` at the top level,
    with or without instances (RFC §7); a bad instance_id is 400, an unknown one 404, on both pages.
    Given `leadership` (a callable returning the Leadership message as JSON), the status page says
    which Controller replica leads under `"leadership"`; given `publishers` (a callable returning
    each serving publisher's health), the page lists them under `"publishers"`.
    """

    cache = RuntimeJsonCache()

    def _not_found(wanted: int) -> web.HTTPNotFound:
        return web.HTTPNotFound(text=json.dumps({"detail": f"unknown instance_id {wanted}"}),
                                content_type="application/json")

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
        protos = [runtime_proto(r) for r in get_runtimes() if wanted is None or r.instance_id == wanted]
        if wanted is not None and not protos:
            raise _not_found(wanted)
        head: dict[str, Any] = {"phase": "DISABLED"} if not scale_down_enabled else {}
        tail: dict[str, Any] = {"leadership": leadership()} if leadership is not None else {}
        if publishers is not None:
            tail["publishers"] = publishers()
        return await _render_off_loop(lambda: status_page_text(head, cache.texts(protos, every=wanted is None), tail))

    async def timeline(request: web.Request) -> web.Response:
        wanted = _instance_filter(request)
        if wanted is None:
            raise web.HTTPBadRequest(text=json.dumps({"detail": "instance_id is required"}), content_type="application/json")
        if not any(r.instance_id == wanted for r in get_runtimes()):
            raise _not_found(wanted)
        protos = []
        for t in get_timeline(wanted):  # copies: a running round goes on adding to its own
            copy = type(t.proto)()
            copy.CopyFrom(t.proto)
            protos.append(copy)
        return await _render_off_loop(
            lambda: json.dumps({"instance_id": wanted, "transactions": [message_json(p) for p in protos]}))

    # GET pages only: a request body has no use here.
    app = web.Application(client_max_size=STATUS_MAX_BODY_BYTES)
    app.router.add_get("/controller/fault_tolerance/status", status)
    app.router.add_get("/controller/fault_tolerance/timeline", timeline)
    if registry is not None:
        add_metrics_route(app, registry)
    return app
