"""Re-inference (the RFC's TokenReinference strategy): a request whose engine faulted while serving it
continues on another endpoint. Pure: no I/O, no clock.

* `plan_stream`: whether a streamed request can be continued, and how (from the client's body).
* `StreamTracker`: splits an engine's SSE bytes into whole events, follows what the client received
  (generated text, token ids when the engine sends them, the token count, whether it finished) and
  rewrites a continuation's events so the client sees one stream: the first attempt's ``id`` and
  ``created``, no second chat role chunk, no second ``prompt_token_ids``, usage counted over the
  whole request, token ids removed again when only the Coordinator asked for them.
* `continuation_body`: the next attempt's body. Completions: prompt = the original prompt's token ids
  + the generated ids when both are known (vLLM's ``return_token_ids``), else the prompt text + the
  generated text; chat: the partial assistant message appended (or the client's own final assistant
  message extended) with ``continue_final_message`` and no generation prompt, as vLLM takes it. The
  remaining ``max_tokens`` (and ``max_completion_tokens``, ``min_tokens``) is what was not generated.

Continuing from the received text equals an uninterrupted run only for deterministic decoding
(greedy, as the reference engine's toy model is); with sampling it is a fresh sample of the rest.
Not continued (such a stream fails with an error event): n/best_of > 1, echo, several
prompts, structured outputs, tool calls or reasoning content in the stream, or a carried sequence
longer than ``max_carried_length``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
MAX_EVENT_BYTES = 4 * 1024 * 1024
_MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens")
_STRUCTURED_KEYS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")
_ID_KEYS = ("token_ids", "prompt_token_ids")


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


@dataclass(frozen=True)
class ResumePlan:
    """How a streamed request is continued; built once from the client's body."""

    chat: bool
    doc: dict[str, Any]
    # Completions: the prompt as text or as token ids (exactly one is set).
    prompt_text: str | None = None
    prompt_ids: list[int] | None = None
    # Ask the engine for token ids (return_token_ids), and remove them from what the client sees.
    request_ids: bool = False
    strip_ids: bool = False
    # Chat: the client's own last message is an assistant message it asked to continue.
    extend_last_message: bool = False

    def upstream_body(self, original: bytes) -> bytes:
        """The first attempt's body: the client's, with return_token_ids added when the Coordinator wants ids."""
        if not self.request_ids or self.doc.get("return_token_ids") is True:
            return original
        return json.dumps({**self.doc, "return_token_ids": True}).encode()


def plan_stream(path: str, doc: dict[str, Any], *, max_carried_length: int, carry_token_ids: bool) -> ResumePlan | str:
    """The plan of a streamed request, or why it cannot be continued elsewhere."""
    n = doc.get("n", 1)
    if n not in (None, 1):
        return f"n={n!r}"
    if doc.get("best_of") not in (None, 1):
        return f"best_of={doc.get('best_of')!r}"
    for key in _STRUCTURED_KEYS:
        if doc.get(key) is not None:
            return f"structured output ({key})"
    response_format = doc.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        return f"structured output (response_format {response_format.get('type')!r})"
    for key in (*_MAX_TOKEN_KEYS, "min_tokens"):
        value = doc.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{key}={value!r} is not an integer"
    if path == COMPLETIONS_PATH:
        if doc.get("echo") is True:
            return "echo"
        prompt = doc.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and (isinstance(prompt[0], str) or _is_ids(prompt[0])):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text, ids = prompt, None
        elif _is_ids(prompt):
            text, ids = None, list(prompt)
        else:
            return "the prompt is not one string or one token id list"
        if len(prompt) > max_carried_length:
            return f"the prompt's length {len(prompt)} exceeds max_carried_length {max_carried_length}"
        wants_ids = doc.get("return_token_ids") is True
        return ResumePlan(chat=False, doc=doc, prompt_text=text, prompt_ids=ids,
                          request_ids=carry_token_ids or wants_ids or ids is not None,
                          strip_ids=not wants_ids and (carry_token_ids or ids is not None))
    if path == CHAT_PATH:
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return "messages is not a non-empty list of objects"
        last = messages[-1]
        extend = doc.get("continue_final_message") is True and last.get("role") == "assistant"
        if extend and not isinstance(last.get("content"), str):
            return "the final assistant message to continue has no string content"
        size = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
        if size > max_carried_length:
            return f"the messages' length {size} exceeds max_carried_length {max_carried_length}"
        # Chat carries text: the chat API takes no prompt token ids.
        return ResumePlan(chat=True, doc=doc, extend_last_message=extend)
    return f"path {path} is not resumable"


@dataclass
class SseEvent:
    raw: bytes
    data: str | None  # the joined data lines; None for a comment or an event without data
    doc: dict[str, Any] | None = None  # parsed when data is a JSON object


def _parse_event(raw: bytes) -> SseEvent:
    if raw.startswith(b"data: ") and raw.find(b"\n") == len(raw) - 2 and b"\r" not in raw:
        text = raw[6:-2].decode("utf-8", "replace")  # the common one-line event, without the line split
    else:
        lines = raw.decode("utf-8", "replace").splitlines()
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
        if not data:
            return SseEvent(raw, None)
        text = "\n".join(data)
    doc: Any = None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # a nesting too deep is as unreadable as bad JSON
            doc = None
    return SseEvent(raw, text, doc if isinstance(doc, dict) else None)


class EventKind:
    DATA = "data"
    DONE = "done"
    ERROR = "error"


@dataclass
class StreamTracker:
    """What the client of one streamed request has received, across its attempts."""

    plan: ResumePlan
    max_carried_length: int
    # The text received so far, as the pieces it came in: appending to one string would copy all of
    # it on every piece (quadratic in a long answer); `text` joins them when a continuation needs it.
    pieces: list[str] = field(default_factory=list)
    text_length: int = 0
    generated_ids: list[int] | None = field(default_factory=list)
    tokens: int = 0
    finished: bool = False
    # Why the stream cannot be continued any more (None: it can).
    unresumable: str | None = None
    prompt_ids: list[int] | None = None
    first_id: Any = None
    first_created: Any = None
    model: Any = None
    object: Any = None
    # Tokens generated before the current attempt started (usage is adjusted by this much).
    carried_tokens: int = 0
    continuation: bool = False
    _buffer: bytearray = field(default_factory=bytearray)

    # -- framing ----------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The whole events completed by ``chunk``; a partial one stays buffered (never sent half)."""
        self._buffer += chunk
        events = []
        while True:
            end, sep = self._boundary()
            if end < 0:
                break
            raw = bytes(self._buffer[:end + sep])
            del self._buffer[:end + sep]
            events.append(_parse_event(raw))
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise ValueError(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes")
        return events

    def _boundary(self) -> tuple[int, int]:
        if b"\r" not in self._buffer:  # LF-only framing, what engines send: one search
            i = self._buffer.find(b"\n\n")
            return (i, 2) if i >= 0 else (-1, 0)
        found = [(i, len(s)) for s in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := self._buffer.find(s)) >= 0]
        return min(found) if found else (-1, 0)

    def pending_bytes(self) -> int:
        return len(self._buffer)

    def new_attempt(self) -> None:
        """A new attempt starts: a partial event of the one before is dropped (never sent half)."""
        self._buffer.clear()

    def start_continuation(self) -> None:
        """What follows continues the stream: rewrite it (ids, role chunk, usage from here)."""
        self._buffer.clear()
        self.carried_tokens = self.tokens
        self.continuation = True

    # -- one event --------------------------------------------------------------------------
    def process(self, event: SseEvent) -> tuple[str, bytes | None]:
        """(kind, bytes to send the client or None to drop it) of one event."""
        if event.data is None:
            return EventKind.DATA, event.raw
        if event.data.strip() == "[DONE]":
            return EventKind.DONE, None
        doc = event.doc
        if doc is None:
            return EventKind.DATA, event.raw
        if ("error" in doc or doc.get("object") == "error") and "choices" not in doc:
            # The engine aborted the request (vLLM: {"error": {...}}, older: {"object": "error", ...}).
            return EventKind.ERROR, None
        changed = self._observe(doc)
        if self.continuation:
            changed |= self._rewrite_continuation(doc)
            if self.plan.chat and _is_role_chunk(doc):
                return EventKind.DATA, None
        if self.plan.strip_ids:
            changed |= _strip_ids(doc)
        if not changed:
            return EventKind.DATA, event.raw
        return EventKind.DATA, f"data: {json.dumps(doc)}\n\n".encode()

    def _observe(self, doc: dict[str, Any]) -> bool:
        if self.first_id is None:
            self.first_id, self.first_created = doc.get("id"), doc.get("created")
            self.model, self.object = doc.get("model"), doc.get("object")
        choices = doc.get("choices")
        if not isinstance(choices, list):
            return False
        if not self.continuation and self.plan.chat and _is_ids(doc.get("prompt_token_ids")):
            self.prompt_ids = list(doc["prompt_token_ids"])
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                if isinstance(choice, dict):
                    self._stop(f"choice index {choice.get('index')!r}")
                continue
            if self.plan.chat:
                delta = choice.get("delta") or {}
                if not isinstance(delta, dict):
                    self._stop("a delta that is not an object")
                    continue
                if delta.get("tool_calls") or delta.get("function_call"):
                    self._stop("tool calls")
                if delta.get("reasoning_content") or delta.get("reasoning"):
                    self._stop("reasoning content")
                piece = delta.get("content")
            else:
                piece = choice.get("text")
                if not self.continuation and _is_ids(choice.get("prompt_token_ids")):
                    self.prompt_ids = list(choice["prompt_token_ids"])
            piece = piece if isinstance(piece, str) else ""
            ids = choice.get("token_ids")
            if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
                if self.generated_ids is not None and self.unresumable is None:
                    self.generated_ids.extend(ids)
                self.tokens += len(ids)
            elif piece:
                self.generated_ids = None
                self.tokens += 1
            if self.unresumable is None and piece:  # nothing is kept once it cannot be carried anyway
                self.pieces.append(piece)
                self.text_length += len(piece)
            if choice.get("finish_reason") is not None:
                self.finished = True
        usage = doc.get("usage")
        if isinstance(usage, dict) and choices and isinstance(usage.get("completion_tokens"), int):
            # vLLM's continuous usage stats: the engine's own count beats counting chunks.
            self.tokens = self.carried_tokens + usage["completion_tokens"]
        if self.unresumable is None and self.text_length + self._prompt_length() > self.max_carried_length:
            self._stop(f"the carried sequence exceeds max_carried_length {self.max_carried_length}")
            self.pieces, self.text_length, self.generated_ids = [], 0, None
        return False

    @property
    def text(self) -> str:
        """Everything received so far, joined (and kept joined: later pieces append to one)."""
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""

    def _prompt_length(self) -> int:
        if self.plan.prompt_text is not None:
            return len(self.plan.prompt_text)
        if self.plan.prompt_ids is not None:
            return len(self.plan.prompt_ids)
        return 0

    def _stop(self, reason: str) -> None:
        if self.unresumable is None:
            self.unresumable = reason

    def _rewrite_continuation(self, doc: dict[str, Any]) -> bool:
        if self.first_id is not None:
            doc["id"] = self.first_id
        if self.first_created is not None:
            doc["created"] = self.first_created
        doc.pop("prompt_token_ids", None)
        for choice in doc.get("choices") or ():
            if isinstance(choice, dict):
                choice.pop("prompt_token_ids", None)
        usage = doc.get("usage")
        if isinstance(usage, dict) and self.carried_tokens:
            if isinstance(usage.get("prompt_tokens"), int):
                usage["prompt_tokens"] = max(0, usage["prompt_tokens"] - self.carried_tokens)
            if isinstance(usage.get("completion_tokens"), int):
                usage["completion_tokens"] += self.carried_tokens
        return True

    # -- the next attempt -------------------------------------------------------------------
    def remaining(self, key: str) -> int | None:
        value = self.plan.doc.get(key)
        return None if value is None else value - self.tokens

    def marker(self, migrations: int, endpoints: list[str]) -> bytes:
        """The last chunk before [DONE] of a migrated stream: says it migrated, and through where."""
        doc = {"id": self.first_id, "object": self.object, "created": self.first_created, "model": self.model,
               "choices": [], "motor_migration": {"migrations": migrations, "endpoints": endpoints}}
        return f"data: {json.dumps(doc)}\n\n".encode()


def _is_role_chunk(doc: dict[str, Any]) -> bool:
    """vLLM's (and the reference engine's) first chat chunk: the role and no content."""
    choices = doc.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    return (isinstance(delta, dict) and "role" in delta and not delta.get("content")
            and not set(delta) - {"role", "content"} and choices[0].get("finish_reason") is None)


def _strip_ids(doc: dict[str, Any]) -> bool:
    changed = doc.pop("prompt_token_ids", None) is not None
    for choice in doc.get("choices") or ():
        if isinstance(choice, dict):
            for key in _ID_KEYS:
                changed |= choice.pop(key, None) is not None
    return changed


class Finished:
    """Everything the client asked for was already delivered: nothing to continue."""


FINISHED = Finished()


def continuation_body(tracker: StreamTracker) -> bytes | Finished | str:
    """The next attempt's body, FINISHED, or why the stream cannot be continued."""
    if tracker.unresumable is not None:
        return tracker.unresumable
    if tracker.finished:
        return FINISHED
    plan = tracker.plan
    doc = copy.deepcopy(plan.doc)
    for key in _MAX_TOKEN_KEYS:
        remaining = tracker.remaining(key)
        if remaining is None:
            continue
        if remaining < 1:
            return FINISHED
        doc[key] = remaining
    if isinstance(doc.get("min_tokens"), int):
        doc["min_tokens"] = max(0, doc["min_tokens"] - tracker.tokens)
    doc["stream"] = True
    if plan.chat:
        messages = doc["messages"]
        if plan.extend_last_message:
            messages[-1]["content"] += tracker.text
        else:
            messages.append({"role": "assistant", "content": tracker.text})
        doc["add_generation_prompt"] = False
        doc["continue_final_message"] = True
        return json.dumps(doc).encode()
    ids = tracker.generated_ids
    origin_ids = plan.prompt_ids if plan.prompt_ids is not None else tracker.prompt_ids
    if plan.request_ids and ids is not None and origin_ids is not None:
        prompt: str | list[int] = [*origin_ids, *ids]
        doc["return_token_ids"] = True
    elif plan.prompt_text is not None:
        prompt = plan.prompt_text + tracker.text
    else:
        return "the generated token ids of a token-id prompt are unknown (the engine sent none)"
    if len(prompt) > tracker.max_carried_length:
        return f"the carried sequence ({len(prompt)}) exceeds max_carried_length {tracker.max_carried_length}"
    doc["prompt"] = prompt
    return json.dumps(doc).encode()
