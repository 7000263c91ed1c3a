from __future__ import annotations

import asyncio
import json
import time

import pytest

from motor.sim.injection import InjectionError, parse_inject_body
from motor.sim.injection_state import InjectionState
from motor.sim.openai_api import ApiError, parse_chat, parse_completion
from motor.sim.toy_model import (
    BYTE_BASE,
    VOCAB_SIZE,
    chat_prompt,
    decode,
    encode,
    expected_chat_completion,
    expected_completion,
    extend_state,
    generate,
    next_token,
    text_state,
    token_text,
)

pytestmark = pytest.mark.timeout(30)  # per test, module fixtures included


def test_completion_defaults_and_prompt_forms() -> None:
    req = parse_completion({"prompt": "hi"}, "m", 100)
    assert (req.prompts, req.max_tokens, req.stream, req.include_usage) == (["hi"], 16, False, False)
    assert parse_completion({"prompt": ["a", "b"], "model": "m"}, "m", 100).prompts == ["a", "b"]
    assert parse_completion({"prompt": [1, 2, 3]}, "m", 100).prompts == [" expert rank token"]
    req = parse_completion({"prompt": [[1], [2, 3]]}, "m", 100)
    assert req.prompts == [" expert", " rank token"] and req.prompt_token_ids(1) == [2, 3]
    assert parse_completion({"prompt": "hi the"}, "m", 100).prompt_token_ids(0) == encode("hi the")
    req = parse_completion({"prompt": "x", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}},
                           "m", 100)
    assert (req.max_tokens, req.stream, req.include_usage) == (5, True, True)


@pytest.mark.parametrize(
    "body, status, named",
    [
        ([], 400, "must be a JSON object"),
        ({}, 400, "prompt is required"),
        ({"prompt": 3}, 400, "prompt must be"),
        ({"prompt": []}, 400, "prompt must be"),
        ({"prompt": "x", "model": "other"}, 404, "`other` does not exist"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be an integer in [1, 100], got 0"),
        ({"prompt": "x", "max_tokens": 101}, 400, "got 101"),
        ({"prompt": "x", "max_tokens": "5"}, 400, "got '5'"),
        ({"prompt": "x", "stream": "yes"}, 400, "stream must be a boolean, got 'yes'"),
        ({"prompt": "x", "n": 2}, 400, "n must be 1, got 2"),
        ({"prompt": "x", "stream_options": 1}, 400, "stream_options must be an object"),
        ({"prompt": [1, VOCAB_SIZE]}, 400, f"token id {VOCAB_SIZE} is outside the toy vocabulary"),
        ({"prompt": "x", "return_token_ids": 1}, 400, "return_token_ids must be a boolean, got 1"),
    ],
)
def test_completion_errors_name_the_value(body: object, status: int, named: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_completion(body, "m", 100)
    assert info.value.status == status and named in info.value.message


def test_chat_prompt_and_errors() -> None:
    req = parse_chat({"messages": [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                      "max_completion_tokens": 3}, "m", 100)
    assert req.prompts == ["system: be brief\nuser: hi\nassistant: "] and req.max_tokens == 3
    # vLLM's flags: no generation prompt, or the final (assistant) message left open to continue it.
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " the"}]
    assert parse_chat({"messages": msgs[:1], "add_generation_prompt": False}, "m", 100).prompts == ["user: hi"]
    assert parse_chat({"messages": msgs, "continue_final_message": True}, "m", 100).prompts == [
        "user: hi\nassistant:  the"]
    with pytest.raises(ApiError, match="Cannot set both"):
        parse_chat({"messages": msgs, "continue_final_message": True, "add_generation_prompt": True}, "m", 100)
    for body, named in [
        ({"messages": []}, "messages must be a non-empty list"),
        ({"messages": ["x"]}, "messages[0] must be an object"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content must be"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ]:
        with pytest.raises(ApiError) as info:
            parse_chat(body, "m", 100)
        assert named in info.value.message


def test_toy_model_is_deterministic() -> None:
    assert text_state("hello") == text_state("hello") != text_state("hello!")
    text = expected_completion("hello", 5)
    assert text == expected_completion("hello", 5) and len(text.split()) == 5
    assert text.startswith(" ") and all(w in text for w in text.split())


def test_next_token_depends_on_the_whole_text_so_continuations_match() -> None:
    """Greedy-like: continuing from prompt + what was generated gives what an uninterrupted run gives."""
    prompt, n = "worker 3 request 7", 40
    whole = expected_completion(prompt, n)
    for cut in (0, 1, 17, 39):
        head = "".join(token_text(t) for t in generate(prompt, cut))
        assert head + expected_completion(prompt + head, n - cut) == whole
    # The executor's incremental state equals the state of the whole text.
    state = text_state(prompt)
    for tid in generate(prompt, n):
        assert tid == next_token(state)
        state = extend_state(state, tid)
    assert state == text_state(prompt + whole)


def test_toy_tokenizer_round_trips() -> None:
    for text in ["", " the expert", "Hello wörld  the", "  a\nb ", "the"]:
        assert decode(encode(text)) == text
    ids = generate("x", 30)
    assert encode(decode(ids)) == ids and all(t < BYTE_BASE for t in ids)
    # Carrying ids or text is the same continuation.
    prompt_ids = encode("some prompt")
    assert expected_completion(decode(prompt_ids + ids), 5) == expected_completion("some prompt" + decode(ids), 5)


def test_chat_continuation_renders_like_the_uninterrupted_prompt() -> None:
    msgs = [("system", "be brief"), ("user", "hi")]
    whole = expected_chat_completion([{"role": r, "content": c} for r, c in msgs], 12)
    head = "".join(" " + w for w in whole.split()[:4])
    continued = chat_prompt([*msgs, ("assistant", head)], continue_final_message=True, add_generation_prompt=False)
    assert head + expected_completion(continued, 8) == whole


def test_inject_body_parsing() -> None:
    assert parse_inject_body(json.dumps({"fault": "executor_death"}).encode())["fault"] == "executor_death"
    for raw, named in [
        (b"nope", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'{"fault": "meteor"}', "unknown fault 'meteor'"),
        (b"{}", "unknown fault None"),
    ]:
        with pytest.raises(InjectionError) as info:
            parse_inject_body(raw)
        assert named in str(info.value)


async def test_status_hang_window_and_clear() -> None:
    state = InjectionState()
    await state.wait_status_released()  # not armed: returns at once
    state.hang_status(0.2)
    t0 = time.monotonic()
    await state.wait_status_released()
    assert time.monotonic() - t0 > 0.15  # held for the window (released by time, not by clear)
    state.hang_status(None)
    waiter = asyncio.create_task(state.wait_status_released())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    state.clear()
    await asyncio.wait_for(waiter, 2.0)
    assert state.to_json()["status_hang_remaining_sec"] is None
