"""OpenAI-compatible inference routes: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``.

Prompts: a string, strings, or token ids (decoded by the toy tokenizer, `motor.sim.toy_model`);
chat messages render through the toy chat template, with vLLM's ``add_generation_prompt`` and
``continue_final_message``. ``return_token_ids`` (vLLM's flag) adds ``prompt_token_ids`` (completions:
on each choice's first chunk; chat: top level of the first chunk) and each choice's ``token_ids``.

Every inference response names the rank that served it (``motor_dp_rank`` in the body and in each
stream chunk, ``X-Motor-DP-Rank`` header) so tests can see routing. While the rank cannot serve,
new requests get 503; in-flight ones are aborted (non-stream: 503 JSON; stream: one
``data: {"error": ...}`` event, then the stream closes without ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from motor.sim.engine import EngineUnavailable, SimEngine
from motor.sim.toy_model import chat_prompt, count_prompt_tokens, decode, encode, token_text

log = logging.getLogger("motor.sim.openai_api")

DEFAULT_MAX_TOKENS = 16
RANK_HEADER = "X-Motor-DP-Rank"


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


@dataclass(frozen=True)
class GenerationRequest:
    prompts: list[str]
    max_tokens: int
    stream: bool
    include_usage: bool
    # vLLM's `return_token_ids`: the prompt's ids and each choice's generated ids in the response.
    return_token_ids: bool = False
    # The prompts' ids as given (token-id prompts), else None (then the toy tokenizer's).
    given_ids: list[list[int]] | None = None

    def prompt_token_ids(self, index: int) -> list[int]:
        return list(self.given_ids[index]) if self.given_ids is not None else encode(self.prompts[index])


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise _bad(f"{key} must be a boolean, got {value!r}", key)
    return value


def _decode_prompt(ids: list[int]) -> str:
    try:
        return decode(ids)
    except ValueError as exc:
        raise _bad(f"prompt: {exc}", "prompt") from None


def _common(body: dict[str, Any], served_model: str, max_tokens_limit: int, *, chat: bool) -> tuple[int, bool, bool]:
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= max_tokens_limit:
        raise _bad(f"{key} must be an integer in [1, {max_tokens_limit}], got {max_tokens!r}", key)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad(f"stream must be a boolean, got {stream!r}", "stream")
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise _bad(f"n must be 1, got {n!r}", "n")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _bad(f"stream_options must be an object, got {options!r}", "stream_options")
        include_usage = bool(options.get("include_usage", False))
    return max_tokens, stream, include_usage


def parse_completion(body: Any, served_model: str, max_tokens_limit: int) -> GenerationRequest:
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, got {type(body).__name__}")
    if "prompt" not in body:
        raise _bad("prompt is required", "prompt")
    prompt = body["prompt"]
    given_ids: list[list[int]] | None = None
    if isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        given_ids = [list(prompt)]
        prompts = [_decode_prompt(prompt)]
    elif (isinstance(prompt, list) and prompt and all(isinstance(p, list) and p for p in prompt)
          and all(isinstance(t, int) and not isinstance(t, bool) for p in prompt for t in p)):
        given_ids = [list(p) for p in prompt]
        prompts = [_decode_prompt(p) for p in prompt]
    else:
        raise _bad(f"prompt must be a string, a non-empty list of strings or token id lists, got {str(prompt)[:80]!r}", "prompt")
    max_tokens, stream, include_usage = _common(body, served_model, max_tokens_limit, chat=False)
    return GenerationRequest(prompts, max_tokens, stream, include_usage,
                             return_token_ids=_flag(body, "return_token_ids", False), given_ids=given_ids)


def _message_text(index: int, message: Any) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise _bad(f"messages[{index}] must be an object, got {message!r}", "messages")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise _bad(f"messages[{index}].role must be a non-empty string, got {role!r}", "messages")
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"messages[{index}].content[{j}] must be a text part, got {str(part)[:80]!r}", "messages")
            parts.append(part["text"])
        text = "\n".join(parts)
    else:
        raise _bad(f"messages[{index}].content must be a string or a list of parts, got {content!r}", "messages")
    return role, text


def parse_chat(body: Any, served_model: str, max_tokens_limit: int) -> GenerationRequest:
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, got {type(body).__name__}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad(f"messages must be a non-empty list, got {str(messages)[:80]!r}", "messages")
    add_generation_prompt = _flag(body, "add_generation_prompt", True)
    continue_final_message = _flag(body, "continue_final_message", False)
    if add_generation_prompt and continue_final_message and "add_generation_prompt" in body:
        raise _bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                   "continue_final_message")
    prompt = chat_prompt([_message_text(i, m) for i, m in enumerate(messages)],
                         add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message)
    max_tokens, stream, include_usage = _common(body, served_model, max_tokens_limit, chat=True)
    return GenerationRequest([prompt], max_tokens, stream, include_usage,
                             return_token_ids=_flag(body, "return_token_ids", False))


async def _merged(engine: SimEngine, prompts: list[str], max_tokens: int) -> AsyncIterator[tuple[int, int]]:
    """(choice index, token id) for all prompts, interleaved as the engine produces them."""
    if len(prompts) == 1:
        async with aclosing(engine.generate(prompts[0], max_tokens)) as tokens:
            async for tid in tokens:
                yield 0, tid
        return
    queue: asyncio.Queue[tuple[int, int] | tuple[int, None] | BaseException] = asyncio.Queue()

    async def run(index: int, prompt: str) -> None:
        try:
            async with aclosing(engine.generate(prompt, max_tokens)) as tokens:
                async for tid in tokens:
                    queue.put_nowait((index, tid))
            queue.put_nowait((index, None))
        except Exception as exc:
            queue.put_nowait(exc)

    tasks = [asyncio.create_task(run(i, p)) for i, p in enumerate(prompts)]
    try:
        done = 0
        for _ in range(len(prompts) * (max_tokens + 1)):
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            index, tid = item
            if tid is None:
                done += 1
                if done == len(prompts):
                    return
                continue
            yield index, tid
    finally:
        for task in tasks:
            task.cancel()


class OpenAiRoutes:
    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.rank = engine.cfg.dp_rank
        self.model = engine.cfg.model

    def _headers(self) -> dict[str, str]:
        return {RANK_HEADER: str(self.rank)}

    def error_response(self, status: int, message: str, err_type: str, param: str | None = None) -> web.Response:
        body = {"error": {"message": message, "type": err_type, "param": param, "code": status},
                "motor_dp_rank": self.rank}
        return web.json_response(body, status=status, headers=self._headers())

    def _unavailable(self, reason: str) -> web.Response:
        return self.error_response(503, reason, "ServiceUnavailableError")

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({
            "object": "list",
            "data": [{"id": self.model, "object": "model", "created": int(self.engine.started_at),
                      "owned_by": "motor-engine-sim", "root": self.model, "parent": None}],
        }, headers=self._headers())

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            try:
                body = json.loads(await request.read())
            except (ValueError, UnicodeDecodeError) as exc:
                raise _bad(f"request body is not valid JSON: {exc}") from None
            parse = parse_chat if chat else parse_completion
            gen = parse(body, self.model, self.engine.cfg.max_tokens_limit)
        except ApiError as exc:
            return self.error_response(exc.status, exc.message, exc.err_type, exc.param)
        reason = self.engine.unavailable_reason()
        if reason is not None:
            return self._unavailable(reason)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        if gen.stream:
            return await self._stream(request, rid, gen, chat)
        texts = [""] * len(gen.prompts)
        counts = [0] * len(gen.prompts)
        ids: list[list[int]] = [[] for _ in gen.prompts]
        try:
            async with aclosing(_merged(self.engine, gen.prompts, gen.max_tokens)) as tokens:
                async for index, tid in tokens:
                    texts[index] += token_text(tid)
                    counts[index] += 1
                    ids[index].append(tid)
        except EngineUnavailable as exc:
            return self._unavailable(str(exc))
        prompt_tokens = sum(count_prompt_tokens(p) for p in gen.prompts)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sum(counts),
                 "total_tokens": prompt_tokens + sum(counts)}
        doc: dict[str, Any] = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                               "created": int(time.time()), "model": self.model}
        if chat:
            choices: list[dict[str, Any]] = [{"index": 0, "message": {"role": "assistant", "content": texts[0]},
                                              "logprobs": None, "finish_reason": "length"}]
            if gen.return_token_ids:
                doc["prompt_token_ids"] = gen.prompt_token_ids(0)
                choices[0]["token_ids"] = ids[0]
        else:
            choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": "length", "stop_reason": None}
                       for i, t in enumerate(texts)]
            if gen.return_token_ids:
                for i, choice in enumerate(choices):
                    choice["prompt_token_ids"] = gen.prompt_token_ids(i)
                    choice["token_ids"] = ids[i]
        doc.update(choices=choices, usage=usage, motor_dp_rank=self.rank)
        return web.json_response(doc, headers=self._headers())

    async def _stream(self, request: web.Request, rid: str, gen: GenerationRequest, chat: bool) -> web.StreamResponse:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        resp = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", **self._headers(),
        })
        await resp.prepare(request)

        async def send(choices: list[dict[str, Any]], usage: dict[str, int] | None = None,
                       **extra: Any) -> None:
            chunk: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": self.model,
                                     **extra, "choices": choices, "motor_dp_rank": self.rank}
            if usage is not None:
                chunk["usage"] = usage
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        counts = [0] * len(gen.prompts)
        try:
            if chat:
                # vLLM: the chat stream's first chunk carries the prompt's ids when asked for.
                extra = {"prompt_token_ids": gen.prompt_token_ids(0)} if gen.return_token_ids else {}
                await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}], **extra)
            async with aclosing(_merged(self.engine, gen.prompts, gen.max_tokens)) as tokens:
                async for index, tid in tokens:
                    counts[index] += 1
                    finish = "length" if counts[index] >= gen.max_tokens else None
                    if chat:
                        choice: dict[str, Any] = {"index": index, "delta": {"content": token_text(tid)},
                                                  "logprobs": None, "finish_reason": finish}
                    else:
                        choice = {"index": index, "text": token_text(tid), "logprobs": None,
                                  "finish_reason": finish, "stop_reason": None}
                        if gen.return_token_ids and counts[index] == 1:
                            choice["prompt_token_ids"] = gen.prompt_token_ids(index)
                    if gen.return_token_ids:
                        choice["token_ids"] = [tid]
                    await send([choice])
            if gen.include_usage:
                prompt_tokens = sum(count_prompt_tokens(p) for p in gen.prompts)
                await send([], {"prompt_tokens": prompt_tokens, "completion_tokens": sum(counts),
                                "total_tokens": prompt_tokens + sum(counts)})
            await resp.write(b"data: [DONE]\n\n")
        except EngineUnavailable as exc:
            error = {"error": {"message": str(exc), "type": "ServiceUnavailableError", "param": None, "code": 503},
                     "motor_dp_rank": self.rank}
            try:
                await resp.write(f"data: {json.dumps(error)}\n\n".encode())
            except ConnectionError:
                pass
            log.info("rank=%d stream %s aborted: %s", self.rank, rid, exc)
            return resp
        except ConnectionError:
            log.info("rank=%d stream %s: client went away", self.rank, rid)
            return resp
        await resp.write_eof()
        return resp


def add_openai_routes(app: web.Application, engine: SimEngine) -> None:
    routes = OpenAiRoutes(engine)
    app.router.add_get("/v1/models", routes.models)
    app.router.add_post("/v1/completions", routes.completions)
    app.router.add_post("/v1/chat/completions", routes.chat_completions)
