"""Role-based authorization of every Motor gRPC server (one shared interceptor) and HTTP page.

The caller's role comes from its client certificate (SAN URI ``spiffe://motor/<role>``, see
`motor.common.security`); `METHOD_ROLES` says which roles may call each method. A method of a Motor
service that is missing from the table is refused to everyone (fail closed); the standard health
and reflection services stay open to any caller that passed the mTLS handshake. A refusal is
PERMISSION_DENIED (HTTP 403) naming the method and the caller's role, is logged, and is counted:
`refusal_counts()` in this process, and every hook added with `add_refusal_hook` is called with
(surface, method, role) — the place for a metrics counter (bounded labels: method and role).

Installed only when client certificates are required (`security` set, or server.tls with
require_client_auth). Without TLS there is no role to check: the Coordinator's shared management
key (`management_key`) then guards Refresh only, and everything else is open (local demo).
"""

from __future__ import annotations

import collections
import inspect
import json
import logging
import threading
from collections.abc import Callable, Mapping

import grpc
from aiohttp import web

from motor.common.security import NO_ROLE, Role, role_of_der, role_of_pem
from motor.common.text import shorten

log = logging.getLogger(__name__)

C, NM, CO, OP, MON = Role.CONTROLLER, Role.NODEMANAGER, Role.COORDINATOR, Role.OPERATOR, Role.MONITOR

# Full gRPC method name → roles allowed to call it.
METHOD_ROLES: Mapping[str, frozenset[Role]] = {
    # Only NodeManagers register, heartbeat and report what their engines say.
    "/motor.v1.Controller/Register": frozenset({NM}),
    "/motor.v1.Controller/Heartbeat": frozenset({NM}),
    "/motor.v1.Controller/HeartbeatStream": frozenset({NM}),
    "/motor.v1.Controller/ReportSoftwareFault": frozenset({NM}),
    "/motor.v1.Controller/ReportSoftwareFaults": frozenset({NM}),
    # Operators (motorctl hw-fault, MindCluster bridges) and controllers (replicas, monitors).
    "/motor.v1.Controller/ReportHardwareFault": frozenset({OP, C}),
    # Reads of the RFC §7 runtime and the timelines: also the read-only monitor role.
    "/motor.v1.Controller/GetFaultToleranceStatus": frozenset({OP, C, MON}),
    "/motor.v1.Controller/WatchFaultToleranceStatus": frozenset({OP, C, MON}),
    "/motor.v1.Controller/GetTimeline": frozenset({OP, C, MON}),
    # Capacity restoration is an operator's decision (it drains the instance for a rebuild).
    "/motor.v1.Controller/RestoreInstance": frozenset({OP}),
    # A (restarted) Coordinator asks the leader for its whole serving view; operators may too.
    "/motor.v1.Controller/RequestPublication": frozenset({CO, OP}),
    # The FT proxy and engine lifecycle are the Controller's alone.
    "/motor.v1.NodeManagerFaultTolerance/Guard": frozenset({C}),
    "/motor.v1.NodeManagerFaultTolerance/Status": frozenset({C}),
    "/motor.v1.NodeManagerFaultTolerance/Apply": frozenset({C}),
    "/motor.v1.NodeManagerFaultTolerance/Finalize": frozenset({C}),
    "/motor.v1.NodeManager/StartEngines": frozenset({C}),
    "/motor.v1.NodeManager/StopEngines": frozenset({C}),
    "/motor.v1.NodeManager/RelaunchEngines": frozenset({C}),
    "/motor.v1.NodeManager/StopPod": frozenset({C}),
    # Read-only description of the pod (operators find engine URLs through it).
    "/motor.v1.NodeManager/DescribePod": frozenset({C, OP}),
    # Publication is the Controller's alone; the published view is readable by operators.
    "/motor.v1.Coordinator/Refresh": frozenset({C}),
    "/motor.v1.Coordinator/ListInstances": frozenset({C, OP}),
    # The idle-fault probe's canary: the Controller's alone (it sends traffic to an engine).
    "/motor.v1.Coordinator/SendCanary": frozenset({C}),
}

# Services any authenticated caller may use.
OPEN_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})

# The Controller's JSON pages (status, timeline, and /metrics on that port): all reads.
STATUS_PAGE_ROLES = frozenset({OP, C, MON})
# A /metrics listener of its own (the NodeManager's): Prometheus scrapes with a monitor certificate.
METRICS_ROLES = frozenset({OP, C, MON})
# The roles that only read: no method of theirs changes anything (a unit test holds the table to it).
READ_ONLY_ROLES = frozenset({MON})

RefusalHook = Callable[[str, str, str], None]  # (surface "grpc" | "http", method or path, role)
_hooks: list[RefusalHook] = []
_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
_lock = threading.Lock()


def add_refusal_hook(hook: RefusalHook) -> None:
    """Called on every refusal, e.g. to increment a metrics counter."""
    _hooks.append(hook)


def count_refusals(registry, name: str = "motor_authz_refusals_total") -> None:  # noqa: ANN001 - a CollectorRegistry
    """`<name>{surface,method,role}` in `registry`, fed by every refusal of this process (the labels
    are bounded: the role table's methods and the four roles)."""
    from prometheus_client import Counter

    counter = Counter(name, "Calls refused by role-based authorization",
                      ["surface", "method", "role"], registry=registry)
    add_refusal_hook(lambda surface, method, role: counter.labels(surface, method, role).inc())


def remove_refusal_hook(hook: RefusalHook) -> None:
    _hooks.remove(hook)


def refusal_counts() -> dict[tuple[str, str, str], int]:
    with _lock:
        return dict(_counts)


def _refused(surface: str, method: str, role: str, peer: str) -> None:
    log.warning("authz: %s %s refused for role %s (peer %s)", surface, method, role, peer)
    with _lock:
        _counts[(surface, method, role)] += 1
    for hook in tuple(_hooks):  # a hook may add hooks while we iterate
        try:
            hook(surface, method, role)
        except Exception:  # a broken hook must not turn a refusal into a crash
            log.exception("authz refusal hook %r failed", hook)


def service_of(method: str) -> str:
    """'/pkg.Service/Method' → 'pkg.Service'."""
    return method.lstrip("/").partition("/")[0]


def denial(method: str, role: str) -> str | None:
    """None when `role` may call `method`, else the refusal message."""
    if service_of(method) in OPEN_SERVICES:
        return None
    allowed = METHOD_ROLES.get(method)
    if allowed is None:
        return f"{method} is not in the authorization table: refused to every role (caller role {role})"
    if role in {r.value for r in allowed}:
        return None
    return (f"{method} is not allowed for role {role} (allowed: "
            f"{', '.join(sorted(r.value for r in allowed))})")


def grpc_peer_role(context: grpc.aio.ServicerContext) -> str:
    auth = context.auth_context() or {}
    certs = auth.get("x509_pem_cert") or []
    return role_of_pem(bytes(certs[0])) if certs else NO_ROLE


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler of a Motor service with the role check (the peer's certificate is only
    known to the handler's context, not to the interceptor itself)."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or service_of(method) in OPEN_SERVICES:
            return handler
        return _guarded(handler, method)


async def _check(method: str, context: grpc.aio.ServicerContext) -> None:
    role = grpc_peer_role(context)
    message = denial(method, role)
    if message is not None:
        _refused("grpc", method, role, context.peer())
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)


def _guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    codec = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            await _check(method, context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **codec)
    if handler.unary_stream is not None:
        inner_stream = handler.unary_stream
        if inspect.isasyncgenfunction(inner_stream):
            async def unary_stream(request, context):
                await _check(method, context)
                async for item in inner_stream(request, context):
                    yield item
        else:
            async def unary_stream(request, context):  # type: ignore[misc]
                await _check(method, context)
                return await inner_stream(request, context)
        return grpc.unary_stream_rpc_method_handler(unary_stream, **codec)
    if handler.stream_stream is not None and inspect.isasyncgenfunction(handler.stream_stream):
        inner_bidi = handler.stream_stream

        async def stream_stream(request_iterator, context):
            await _check(method, context)
            async for item in inner_bidi(request_iterator, context):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, **codec)
    # Motor has no client-streaming methods, and its bidirectional ones are async generators; refuse
    # any other kind rather than pass it through unchecked.
    kind = "stream_unary" if handler.stream_unary is not None else "stream_stream"

    async def refuse(request_iterator, context):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{method}: {kind} methods are not authorized")

    if kind == "stream_unary":
        return grpc.stream_unary_rpc_method_handler(refuse, **codec)
    return grpc.stream_stream_rpc_method_handler(refuse, **codec)


# -- HTTP --------------------------------------------------------------------------------------
def http_peer_role(request: web.Request) -> str:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return role_of_der(der) if der else NO_ROLE


def http_role_middleware(allowed: frozenset[Role], label: str):
    """aiohttp middleware: 403 naming the path and role unless the client certificate's role is allowed."""
    names = {r.value for r in allowed}

    @web.middleware
    async def authorize(request: web.Request, handler):
        role = http_peer_role(request)
        if role not in names:
            resource = request.match_info.route.resource
            route = getattr(resource, "canonical", None) or "<unmatched>"
            _refused("http", f"{label} {route}", role, f"{request.remote} path {shorten(request.path)}")
            detail = (f"{request.method} {shorten(request.path)} is not allowed for role {role} "
                      f"(allowed: {', '.join(sorted(names))})")
            raise web.HTTPForbidden(text=json.dumps({"detail": detail}), content_type="application/json")
        return await handler(request)

    return authorize
