"""A steady, bounded stream of OpenAI completions through the Coordinator, with every outcome kept.

Used by the demo, the e2e tests and the benchmarks to count what a recovery costs in requests.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestResult:
    started_sec: float
    ended_sec: float
    status: int  # HTTP status; 0 when no answer came
    rank: int | None  # engine rank that served it
    error: str = ""
    prompt: str = ""
    # The completion's text (streamed: every chunk's text or delta content, in order).
    text: str = ""
    # Times the Coordinator continued it elsewhere (re-inference): the stream's motor_migration
    # chunk, or a non-streamed answer's X-Motor-Migrated header.
    migrations: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


@dataclass
class LoadGenerator:
    """`concurrency` workers, each sending one request at a time until stopped or bounded."""

    base_url: str
    model: str = "motor-sim"
    concurrency: int = 4
    max_tokens: int = 8
    stream: bool = False
    request_timeout_sec: float = 60.0
    max_requests: int = 100_000
    max_duration_sec: float = 600.0
    pause_sec: float = 0.0
    # Chat completions (one user message, the prompt) instead of completions.
    chat: bool = False
    results: list[RequestResult] = field(default_factory=list)
    # For an https base_url (the Coordinator with `security`): trusts its CA.
    ssl_context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._sent = 0
        self._started_sec = 0.0

    def start(self) -> LoadGenerator:
        self._started_sec = time.monotonic()
        for i in range(self.concurrency):
            thread = threading.Thread(target=self._worker, args=(i,), name=f"load-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_sec: float = 60.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_sec
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _take_ticket(self) -> bool:
        with self._lock:
            if self._sent >= self.max_requests or time.monotonic() - self._started_sec > self.max_duration_sec:
                return False
            self._sent += 1
            return True

    def _worker(self, worker: int) -> None:
        n = 0
        while not self._stop.is_set() and self._take_ticket():
            n += 1
            result = self.send_one(f"worker {worker} request {n}")
            with self._lock:
                self.results.append(result)
            if self.pause_sec:
                self._stop.wait(self.pause_sec)

    def send_one(self, prompt: str) -> RequestResult:
        doc: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "stream": self.stream}
        if self.chat:
            doc["messages"] = [{"role": "user", "content": prompt}]
        else:
            doc["prompt"] = prompt
        path = "/v1/chat/completions" if self.chat else "/v1/completions"
        req = urllib.request.Request(f"{self.base_url}{path}", data=json.dumps(doc).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        start = time.time()
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout_sec, context=self.ssl_context) as resp:
                raw = resp.read().decode()
                rank = _rank(resp.headers.get("X-Motor-Endpoint"), resp.headers.get("X-Motor-DP-Rank"))
                if self.stream:
                    error = _stream_error(raw)
                    text, migrations = _stream_text(raw)
                else:
                    error, text = "", _body_text(raw)
                    migrations = int(resp.headers.get("X-Motor-Migrated") or 0)
                return RequestResult(start, time.time(), resp.status, rank, error, prompt, text, migrations)
        except urllib.error.HTTPError as exc:
            return RequestResult(start, time.time(), exc.code, None, exc.read().decode(errors="replace")[:300], prompt)
        except (urllib.error.URLError, OSError) as exc:
            return RequestResult(start, time.time(), 0, None, str(exc), prompt)

    def counts(self) -> dict[str, int]:
        with self._lock:
            done = list(self.results)
        return {"sent": len(done), "succeeded": sum(r.ok for r in done), "failed": sum(not r.ok for r in done)}

    def snapshot(self) -> list[RequestResult]:
        with self._lock:
            return list(self.results)


def _rank(endpoint_header: str | None, rank_header: str | None) -> int | None:
    for text in (rank_header, (endpoint_header or "").rpartition("/")[2]):
        if text and text.strip().lstrip("-").isdigit():
            return int(text)
    return None


def _choice_text(choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    if isinstance(choice.get("text"), str):
        return choice["text"]
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict) and isinstance(part.get("content"), str):
            return part["content"]
    return ""


def _stream_text(raw: str) -> tuple[str, int]:
    """(text, migrations) of an SSE body."""
    text, migrations = [], 0
    for line in raw.splitlines():
        if not line.startswith("data: {"):
            continue
        try:
            doc = json.loads(line[len("data: "):])
        except ValueError:
            continue
        text.extend(_choice_text(c) for c in doc.get("choices") or [])
        migrations = max(migrations, int((doc.get("motor_migration") or {}).get("migrations", 0)))
    return "".join(text), migrations


def _body_text(raw: str) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return ""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    return _choice_text(choices[0]) if isinstance(choices, list) and choices else ""


def _stream_error(raw: str) -> str:
    """A stream that carried an error event or never reached [DONE] failed."""
    if '"error"' in raw:
        return "stream carried an error event"
    if "data: [DONE]" not in raw:
        return "stream ended without [DONE]"
    return ""


def trigger_traffic(cluster_or_url, requests: int = 1) -> threading.Thread:
    """Sends a few requests in the background, so survivors run a collective and notice a dead
    peer, without the caller blocking while the Coordinator holds them through the recovery."""
    if hasattr(cluster_or_url, "load_generator"):
        gen = cluster_or_url.load_generator(concurrency=1, max_tokens=4, request_timeout_sec=120.0)
    else:
        gen = LoadGenerator(cluster_or_url, concurrency=1, max_tokens=4, request_timeout_sec=120.0)
    thread = threading.Thread(target=lambda: [gen.send_one(f"trigger {i}") for i in range(requests)], daemon=True)
    thread.start()
    return thread
