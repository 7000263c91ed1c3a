"""The OpenAI-compatible wire format as the Coordinator speaks it: request ids, request bodies, the
headers passed between client and engine, and error answers (a JSON body, or one SSE event inside a
stream that already started), all shaped ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from motor.coordinator.routing import Route

ENDPOINT_HEADER = "X-Motor-Endpoint"
REQUEST_ID_HEADER = "X-Request-Id"
MIGRATED_HEADER = "X-Motor-Migrated"
MIGRATED_FROM_HEADER = "X-Motor-Migrated-From"
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
_ERROR_DETAIL_MAX_BYTES = 2048
# Not forwarded from the engine's response: hop-by-hop headers and what aiohttp sets itself.
_DROPPED_RESPONSE_HEADERS = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Content-Length", "Date", "Server",
    )
)
# Forwarded from the client's request to the engine.
_FORWARDED_REQUEST_HEADERS = ("Content-Type", "Accept", "Authorization", "OpenAI-Organization", "OpenAI-Project")


class BadRequest(ValueError):
    pass


def request_id_of(request: web.Request) -> str:
    """The client's X-Request-Id when it is a sane token, else a fresh one."""
    given = request.headers.get(REQUEST_ID_HEADER)
    if given and _REQUEST_ID_RE.match(given):
        return given
    return uuid.uuid4().hex


def parse_inference_body(body: bytes) -> tuple[str | None, bool]:
    """(requested model or None, stream flag) of an OpenAI request body; BadRequest otherwise."""
    doc = parse_inference_doc(body)
    return (doc.get("model") or None), doc.get("stream") is True


def parse_inference_doc(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object with a string (or absent) model; BadRequest otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        # A body nested thousands deep exhausts the parser's stack: the client's error, not ours.
        raise BadRequest("request body is not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(doc).__name__}")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}")
    return doc


def openai_error(
    status: int,
    message: str,
    err_type: str,
    code: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def sse_error(message: str) -> bytes:
    """The one event that ends a started stream which cannot be completed."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": "upstream_failed"}}
    return f"data: {json.dumps(body)}\n\n".encode()


def answer_message(response: web.Response) -> str:
    """The message of one of our own OpenAI-shaped error answers."""
    try:
        return str(json.loads(response.text or "")["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status}"


def event_error(doc: dict[str, Any] | None) -> str:
    """The message of an engine's SSE error event, on one line."""
    if not doc:
        return "error event"
    err = doc.get("error", doc)
    message = err.get("message") if isinstance(err, dict) else err
    return " ".join(str(message).split())[:300]


async def error_detail(resp: aiohttp.ClientResponse) -> str:
    """`` (<message>)`` of an engine's error answer (OpenAI or FastAPI shaped, else its text), or ""."""
    try:
        raw = await resp.content.read(_ERROR_DETAIL_MAX_BYTES)
    except (aiohttp.ClientError, TimeoutError):
        return ""
    try:
        doc: Any = json.loads(raw)
        text = doc["error"]["message"] if isinstance(doc.get("error"), dict) else doc.get("detail", raw)
    except (ValueError, AttributeError, KeyError, TypeError, RecursionError):
        text = raw.decode("utf-8", "replace")
    text = " ".join(str(text).split())[:300]
    return f" ({text})" if text else ""


# Set on a request whose Authorization carried the Coordinator's own API key (motor.coordinator.admission).
KEY_CHECKED = web.RequestKey("motor_api_key_checked", bool)


def upstream_headers(request: web.Request, request_id: str) -> dict[str, str]:
    """What the engine gets of the client's headers, with the request id (not the Coordinator's API key)."""
    headers = {name: request.headers[name] for name in _FORWARDED_REQUEST_HEADERS if name in request.headers}
    if request.get(KEY_CHECKED):
        headers.pop("Authorization", None)
    headers.setdefault("Content-Type", "application/json")
    headers[REQUEST_ID_HEADER] = request_id
    return headers


def response_headers(resp: aiohttp.ClientResponse, route: Route, request_id: str) -> CIMultiDict[str]:
    """What the client gets of the engine's headers, with the endpoint that served and the request id."""
    headers: CIMultiDict[str] = CIMultiDict(
        (k, v) for k, v in resp.headers.items() if k.lower() not in _DROPPED_RESPONSE_HEADERS
    )
    headers[ENDPOINT_HEADER] = route.label
    headers[REQUEST_ID_HEADER] = request_id
    return headers
