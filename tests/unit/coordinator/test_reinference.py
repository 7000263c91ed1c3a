"""Re-inference, pure parts: what can be continued, the SSE tracker over split bytes, the rewrite of a
continuation's events, and the next attempt's body, checked against the reference engine's toy
model (a continuation from the carried prompt gives exactly the uninterrupted text)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from motor.coordinator.reinference import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    FINISHED,
    EventKind,
    ResumePlan,
    StreamTracker,
    continuation_body,
    plan_stream,
)
from motor.sim.toy_model import (
    chat_prompt,
    decode,
    encode,
    expected_chat_completion,
    expected_completion,
    generate,
    token_text,
)

pytestmark = pytest.mark.timeout(30)


def plan(path: str, doc: dict[str, Any], *, max_len: int = 10_000, ids: bool = True) -> ResumePlan:
    result = plan_stream(path, doc, max_carried_length=max_len, carry_token_ids=ids)
    assert isinstance(result, ResumePlan), result
    return result


def sse(doc: Any) -> bytes:
    return f"data: {doc if isinstance(doc, str) else json.dumps(doc)}\n\n".encode()


def completion_chunks(prompt: str, n: int, start: int = 0, *, rid: str = "cmpl-a", ids: bool = False,
                      carried: str = "") -> list[bytes]:
    """The reference engine's stream of ``prompt`` (+ ``carried``), tokens start..start+n."""
    out = []
    for i, tid in enumerate(generate(prompt + carried, n)):
        choice: dict[str, Any] = {"index": 0, "text": token_text(tid), "logprobs": None,
                                  "finish_reason": "length" if i == n - 1 else None}
        if ids:
            choice["token_ids"] = [tid]
            if i == 0:
                choice["prompt_token_ids"] = encode(prompt + carried)
        out.append(sse({"id": rid, "object": "text_completion", "created": 100 + start, "model": "m",
                        "choices": [choice]}))
    return out


def run(tracker: StreamTracker, raw: bytes, piece: int = 7) -> tuple[list[str], bytes]:
    """Feeds ``raw`` in pieces of ``piece`` bytes; (event kinds, bytes sent to the client)."""
    kinds, sent = [], b""
    for i in range(0, len(raw), piece):
        for event in tracker.feed(raw[i:i + piece]):
            kind, data = tracker.process(event)
            kinds.append(kind)
            sent += data or b""
    return kinds, sent


def client_text(sent: bytes) -> str:
    text = ""
    for line in sent.decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:]).get("choices", []):
                text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return text


@pytest.mark.parametrize("doc, why", [
    ({"prompt": "x", "n": 2}, "n=2"),
    ({"prompt": "x", "best_of": 3}, "best_of=3"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": ["a", "b"]}, "not one string"),
    ({"prompt": "x", "guided_json": {}}, "structured output"),
    ({"prompt": "x", "response_format": {"type": "json_object"}}, "structured output"),
    ({"prompt": "x", "max_tokens": "5"}, "is not an integer"),
    ({"prompt": "x" * 11}, "exceeds max_carried_length 10"),
])
def test_what_cannot_be_continued_says_why(doc: dict[str, Any], why: str) -> None:
    result = plan_stream(COMPLETIONS_PATH, doc, max_carried_length=10, carry_token_ids=True)
    assert isinstance(result, str) and why in result
    assert isinstance(plan_stream(CHAT_PATH, {"messages": "hi"}, max_carried_length=10, carry_token_ids=True), str)
    assert "not resumable" in plan_stream("/v1/embeddings", {}, max_carried_length=10, carry_token_ids=True)


def test_completion_continued_from_text_equals_the_uninterrupted_stream() -> None:
    prompt, n, cut = "worker 1 request 2", 20, 7
    p = plan(COMPLETIONS_PATH, {"prompt": prompt, "max_tokens": n, "stream": True}, ids=False)
    assert p.upstream_body(b"orig") == b"orig" and not p.strip_ids
    tracker = StreamTracker(p, 10_000)
    first = b"".join(completion_chunks(prompt, n)[:cut])
    kinds, sent = run(tracker, first + b'data: {"id": "cmpl-a", "cho')  # a half event, then the break
    assert kinds == [EventKind.DATA] * cut and sent == first, "the first attempt is passed through byte for byte"
    assert tracker.tokens == cut and not tracker.finished and tracker.pending_bytes() > 0
    body = continuation_body(tracker)
    assert isinstance(body, bytes)
    doc = json.loads(body)
    assert doc["prompt"] == prompt + tracker.text and doc["max_tokens"] == n - cut and doc["stream"] is True
    tracker.start_continuation()
    rest = b"".join(completion_chunks(prompt, n - cut, rid="cmpl-b", carried=tracker.text)) + sse("[DONE]")
    kinds, sent2 = run(tracker, rest, piece=5)
    assert kinds[-1] == EventKind.DONE
    assert client_text(first + sent2) == expected_completion(prompt, n)
    ids = {json.loads(line[6:])["id"] for line in sent2.decode().splitlines() if line.startswith("data: {")}
    assert ids == {"cmpl-a"}, "the continuation keeps the first attempt's id"
    assert b'"created": 100' in sent2
    marker = json.loads(tracker.marker(1, ["3/0", "1/1"])[6:])
    assert marker["choices"] == [] and marker["motor_migration"] == {"migrations": 1, "endpoints": ["3/0", "1/1"]}
    assert marker["id"] == "cmpl-a"


def test_completion_continued_from_token_ids_and_ids_stripped_for_the_client() -> None:
    prompt, n, cut = "hello the", 12, 5
    p = plan(COMPLETIONS_PATH, {"prompt": prompt, "max_tokens": n, "stream": True})
    assert p.request_ids and p.strip_ids
    assert json.loads(p.upstream_body(b"x"))["return_token_ids"] is True
    tracker = StreamTracker(p, 10_000)
    _, sent = run(tracker, b"".join(completion_chunks(prompt, n, ids=True)[:cut]))
    assert b"token_ids" not in sent, "ids the client did not ask for are removed"
    assert tracker.prompt_ids == encode(prompt) and tracker.generated_ids == generate(prompt, cut)
    doc = json.loads(continuation_body(tracker))  # type: ignore[arg-type]
    assert doc["prompt"] == encode(prompt) + generate(prompt, cut) and doc["return_token_ids"] is True
    assert expected_completion(decode(doc["prompt"]), n - cut) == expected_completion(prompt, n)[len(tracker.text):]


def test_token_id_prompt_needs_the_engine_s_ids() -> None:
    p = plan(COMPLETIONS_PATH, {"prompt": [1, 2, 3], "max_tokens": 9}, ids=False)
    assert p.request_ids and p.strip_ids and p.prompt_ids == [1, 2, 3]
    tracker = StreamTracker(p, 10_000)
    run(tracker, b"".join(completion_chunks(decode([1, 2, 3]), 9)[:3]))  # no ids in the stream
    assert tracker.generated_ids is None
    assert "token ids of a token-id prompt are unknown" in continuation_body(tracker)  # type: ignore[operator]
    tracker = StreamTracker(p, 10_000)
    run(tracker, b"".join(completion_chunks(decode([1, 2, 3]), 9, ids=True)[:3]))
    doc = json.loads(continuation_body(tracker))  # type: ignore[arg-type]
    assert doc["prompt"][:3] == [1, 2, 3] and len(doc["prompt"]) == 6 and doc["max_tokens"] == 6


def chat_chunks(messages: list[dict[str, str]], n: int, *, rid: str, carried: str = "",
                usage: tuple[int, int] | None = None) -> list[bytes]:
    roles = [(m["role"], m["content"]) for m in messages]
    prompt = chat_prompt([*roles, ("assistant", carried)], continue_final_message=True) if carried else \
        chat_prompt(roles)
    out = [sse({"id": rid, "object": "chat.completion.chunk", "created": 5, "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
    for i, tid in enumerate(generate(prompt, n)):
        out.append(sse({"id": rid, "object": "chat.completion.chunk", "created": 5, "model": "m",
                        "choices": [{"index": 0, "delta": {"content": token_text(tid)},
                                     "finish_reason": "length" if i == n - 1 else None}]}))
    if usage is not None:
        out.append(sse({"id": rid, "object": "chat.completion.chunk", "created": 5, "model": "m", "choices": [],
                        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                  "total_tokens": sum(usage)}}))
    return out


def test_chat_continued_with_the_assistant_prefix_one_role_chunk_and_whole_usage() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    n, cut = 15, 6
    p = plan(CHAT_PATH, {"messages": messages, "max_completion_tokens": n, "stream": True,
                         "stream_options": {"include_usage": True}})
    tracker = StreamTracker(p, 10_000)
    _, sent = run(tracker, b"".join(chat_chunks(messages, n, rid="c1")[:cut + 1]))  # role chunk + cut tokens
    doc = json.loads(continuation_body(tracker))  # type: ignore[arg-type]
    assert doc["messages"] == [*messages, {"role": "assistant", "content": tracker.text}]
    assert doc["continue_final_message"] is True and doc["add_generation_prompt"] is False
    assert doc["max_completion_tokens"] == n - cut
    tracker.start_continuation()
    rest = b"".join(chat_chunks(messages, n - cut, rid="c2", carried=tracker.text, usage=(9 + cut, n - cut)))
    kinds, sent2 = run(tracker, rest + sse("[DONE]"), piece=11)
    assert kinds[-1] == EventKind.DONE
    assert client_text(sent + sent2) == expected_chat_completion(messages, n)
    assert (sent + sent2).count(b'"role"') == 1, "one role chunk only"
    usage = json.loads(sent2.decode().split("data: ")[-1])["usage"]
    assert usage == {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}


def test_chat_own_final_assistant_message_is_extended() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " the"}]
    p = plan(CHAT_PATH, {"messages": messages, "continue_final_message": True, "add_generation_prompt": False})
    assert p.extend_last_message
    tracker = StreamTracker(p, 10_000)
    run(tracker, sse({"id": "c", "choices": [{"index": 0, "delta": {"content": " rank"}}]}))
    doc = json.loads(continuation_body(tracker))  # type: ignore[arg-type]
    assert doc["messages"][-1] == {"role": "assistant", "content": " the rank"} and len(doc["messages"]) == 2
    assert messages[-1]["content"] == " the", "the client's body is not modified"


def test_error_event_done_finished_and_limits() -> None:
    p = plan(COMPLETIONS_PATH, {"prompt": "p", "max_tokens": 2})
    tracker = StreamTracker(p, 10_000)
    kinds, _ = run(tracker, sse({"error": {"message": "dp rank 1 is dead", "code": 503}}) +
                   sse({"object": "error", "message": "old style"}) + sse("[DONE]") + b": keepalive\n\n")
    assert kinds == [EventKind.ERROR, EventKind.ERROR, EventKind.DONE, EventKind.DATA]
    run(tracker, b"".join(completion_chunks("p", 2)))
    assert tracker.finished and continuation_body(tracker) is FINISHED
    # All tokens delivered but the finish chunk lost: nothing to continue either.
    tracker = StreamTracker(p, 10_000)
    run(tracker, b"".join(completion_chunks("p", 3)[:2]))
    assert continuation_body(tracker) is FINISHED
    # Tool calls and over-long carried sequences stop re-inference with a reason.
    tracker = StreamTracker(plan(CHAT_PATH, {"messages": [{"role": "user", "content": "x"}]}), 10_000)
    run(tracker, sse({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"id": "t"}]}}]}))
    assert continuation_body(tracker) == "tool calls"
    tracker = StreamTracker(plan(COMPLETIONS_PATH, {"prompt": "abc"}, max_len=8), 8)
    run(tracker, b"".join(completion_chunks("abc", 3)[:2]))
    assert "exceeds max_carried_length 8" in continuation_body(tracker)  # type: ignore[operator]


def test_continuous_usage_counts_tokens_and_oversized_events_are_refused() -> None:
    tracker = StreamTracker(plan(COMPLETIONS_PATH, {"prompt": "p", "max_tokens": 10}, ids=False), 10_000)
    run(tracker, sse({"id": "a", "choices": [{"index": 0, "text": " the expert"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 2}}))
    assert tracker.tokens == 2 and json.loads(continuation_body(tracker))["max_tokens"] == 8  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exceeds"):
        tracker.feed(b"data: " + b"x" * (5 * 1024 * 1024))


def test_the_carried_text_is_kept_as_pieces_and_joined_once_when_asked() -> None:
    """Appending each piece to one string would copy the whole text every time (quadratic; see
    benchmarks/reinference_text.py): the tracker keeps the pieces and joins them on demand."""
    prompt, n = "hello", 40
    tracker = StreamTracker(plan(COMPLETIONS_PATH, {"prompt": prompt, "max_tokens": n, "stream": True}), 10_000)
    run(tracker, b"".join(completion_chunks(prompt, n)))
    assert len(tracker.pieces) == n and tracker.text_length == sum(map(len, tracker.pieces))
    assert tracker.text == expected_completion(prompt, n)
    assert len(tracker.pieces) == 1  # joined once; later pieces append beside it
