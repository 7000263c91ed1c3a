"""Small synchronous HTTP client for one ``motor-engine-sim`` rank (tests, benchmark, demos).

Standard library only, every call bounded by ``timeout_sec``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

DEFAULT_FT_PREFIX = "/v1/fault_tolerance"


@dataclass
class HttpResult:
    status: int
    body: Any  # parsed JSON when possible, else text
    headers: dict[str, str]


class SimClient:
    def __init__(self, base_url: str, *, ft_prefix: str = DEFAULT_FT_PREFIX, timeout_sec: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.ft_prefix = ft_prefix
        self.timeout_sec = timeout_sec

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                timeout_sec: float | None = None, content_type: str | None = "application/json") -> HttpResult:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None and content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout_sec or self.timeout_sec) as resp:
                status, payload, headers = resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            status, payload, headers = exc.code, exc.read(), dict(exc.headers)
        text = payload.decode("utf-8", "replace")
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return HttpResult(status, parsed, headers)

    # -- FT API ---------------------------------------------------------------------------
    def status(self, timeout_sec: float | None = None) -> dict[str, Any]:
        res = self.request("GET", f"{self.ft_prefix}/status", timeout_sec=timeout_sec)
        if res.status != 200:
            raise RuntimeError(f"{self.base_url} status -> {res.status} {res.body}")
        return res.body

    def entry(self, timeout_sec: float | None = None) -> dict[str, Any]:
        return self.status(timeout_sec)["engines"][0]

    def apply(self, instruction: str, request_id: str, params: dict[str, Any] | None = None) -> HttpResult:
        body: dict[str, Any] = {"instruction": instruction, "request_id": request_id}
        if params is not None:
            body["params"] = params
        return self.request("POST", f"{self.ft_prefix}/apply", body)

    def scale_down(self, request_id: str, removed: list[int], master_ip: str, store_port: int) -> HttpResult:
        return self.apply("scale_down", request_id,
                          {"removed_dp_ranks": removed, "dp_master_ip": master_ip, "dp_store_port": store_port})

    def scale_up(self, request_id: str, added: list[int], removed: list[int], master_ip: str,
                 store_port: int) -> HttpResult:
        return self.apply("scale_up", request_id, {"added_dp_ranks": added, "removed_dp_ranks": removed,
                                                   "dp_master_ip": master_ip, "dp_store_port": store_port})

    # -- admin (needs --enable-fault-injection) -------------------------------------------
    def inject(self, fault: str, **params: Any) -> HttpResult:
        return self.request("POST", "/motor/admin/inject", {"fault": fault, **params})

    def admin_state(self) -> dict[str, Any]:
        res = self.request("GET", "/motor/admin/state")
        if res.status != 200:
            raise RuntimeError(f"{self.base_url} admin state -> {res.status} {res.body}")
        return res.body

    # -- inference ------------------------------------------------------------------------
    def complete(self, prompt: str, max_tokens: int = 8, timeout_sec: float | None = None, **extra: Any) -> HttpResult:
        return self.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, **extra},
                            timeout_sec=timeout_sec)

    def chat(self, content: str, max_tokens: int = 8, timeout_sec: float | None = None, **extra: Any) -> HttpResult:
        return self.request("POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra},
                            timeout_sec=timeout_sec)

    def stream(self, path: str, body: dict[str, Any], timeout_sec: float | None = None) -> tuple[int, dict[str, str], list[Any]]:
        """POST a streaming request; returns (status, headers, events) where events are parsed
        ``data:`` payloads and the literal string ``"[DONE]"``."""
        req = urllib.request.Request(self.base_url + path, data=json.dumps({**body, "stream": True}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        events: list[Any] = []
        try:
            with urllib.request.urlopen(req, timeout=timeout_sec or self.timeout_sec) as resp:
                headers = dict(resp.headers)
                for line in resp:
                    text = line.decode("utf-8").strip()
                    if not text.startswith("data: "):
                        continue
                    payload = text[len("data: "):]
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
                return resp.status, headers, events
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), [json.loads(exc.read() or b"null")]


class InjectionError(RuntimeError):
    """The engine refused or could not take a fault injection; the message says which and why."""


def inject_fault(base_url: str, fault: str, params: dict[str, Any] | None = None,
                 timeout_sec: float = 10.0) -> dict[str, Any]:
    """POST /motor/admin/inject; the engine's answer. A `kill_process` that takes the connection
    down with the engine counts as done."""
    try:
        res = SimClient(base_url, timeout_sec=timeout_sec).inject(fault, **(params or {}))
    except (urllib.error.URLError, ConnectionError) as exc:
        if fault == "kill_process":
            return {"fault": fault, "note": f"engine went away as asked: {exc}"}
        raise InjectionError(f"cannot reach {base_url} to inject {fault!r}: {exc}") from None
    if res.status != 200:
        raise InjectionError(f"{base_url} refused fault {fault!r}: HTTP {res.status} {res.body}")
    return res.body
