"""Deterministic toy "model" and tokenizer (pure, shared by the API process and the executor).

Like greedy decoding on a real model, the next token is a deterministic function of the *whole
preceding text* (prompt + everything generated so far), not of the request: so a generation
continued from "prompt + the text received so far" is identical to an uninterrupted one, on every
rank and every run. That is what lets tests check a request migrated mid-stream (the Coordinator's
re-inference) token for token.

The text state is a polynomial hash of the UTF-8 bytes (base 256, mod the Mersenne prime 2^61-1):
``state(s + t) = state(s) * 256^len(t) + int(t)``, so the executor extends it token by token while
it still equals the hash of the whole text. The token chosen in a state is
``blake2b(state) mod len(VOCAB)``.

Tokenizer: ids ``0..len(VOCAB)-1`` are the words (text ``" " + word``), ids ``BYTE_BASE..+255`` one
raw byte each (for any other text). ``decode(encode(s)) == s`` for every string, and
``encode(decode(ids)) == ids`` for word ids (what the model generates), so token ids and text can be
carried interchangeably across a migration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

VOCAB: tuple[str, ...] = (
    "the", "expert", "rank", "token", "motor", "keeps", "serving", "while", "a", "peer",
    "fails", "and", "survivors", "rebuild", "their", "group", "with", "gloo", "over", "store",
    "data", "parallel", "wide", "mixture", "of", "experts", "route", "each", "step", "in",
    "lockstep", "wave", "scale", "down", "replica", "slot", "healthy", "ready", "fast", "quiet",
    "river", "stone", "light", "cloud", "north", "green", "blue", "amber", "seven", "eleven",
    "bright", "steady", "calm", "swift",
)
BYTE_BASE = len(VOCAB)
VOCAB_SIZE = BYTE_BASE + 256

_MOD = (1 << 61) - 1
_WORD_IDS = {word: i for i, word in enumerate(VOCAB)}
_PIECE_RE = re.compile(r" [^ ]+|[^ ]+| ")
_TOKEN_BYTES = tuple((" " + w).encode() for w in VOCAB) + tuple(bytes([b]) for b in range(256))
_TOKEN_SHIFT = tuple(pow(256, len(b), _MOD) for b in _TOKEN_BYTES)
_TOKEN_VALUE = tuple(int.from_bytes(b, "big") for b in _TOKEN_BYTES)


def text_state(text: str) -> int:
    """The model's state after ``text`` (stable across processes, unlike ``hash``)."""
    return int.from_bytes(text.encode("utf-8"), "big") % _MOD


def extend_state(state: int, tid: int) -> int:
    """The state after appending token ``tid``'s text."""
    return (state * _TOKEN_SHIFT[tid] + _TOKEN_VALUE[tid]) % _MOD


def next_token(state: int) -> int:
    """The (word) token the model emits in ``state``."""
    digest = hashlib.blake2b(state.to_bytes(8, "big"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % len(VOCAB)


def token_text(tid: int) -> str:
    if 0 <= tid < BYTE_BASE:
        return " " + VOCAB[tid]
    return _TOKEN_BYTES[tid].decode("utf-8", "replace")


def encode(text: str) -> list[int]:
    """Token ids of ``text``: known ``" word"`` pieces as word ids, everything else byte by byte."""
    ids: list[int] = []
    for piece in _PIECE_RE.findall(text):
        word = _WORD_IDS.get(piece[1:]) if piece.startswith(" ") else None
        if word is not None:
            ids.append(word)
        else:
            ids.extend(BYTE_BASE + b for b in piece.encode("utf-8"))
    return ids


def decode(ids: Iterable[int]) -> str:
    """The text of token ids; raises ValueError naming an id outside ``[0, VOCAB_SIZE)``."""
    out = bytearray()
    for tid in ids:
        if not 0 <= tid < VOCAB_SIZE:
            raise ValueError(f"token id {tid} is outside the toy vocabulary [0, {VOCAB_SIZE})")
        out += _TOKEN_BYTES[tid]
    return out.decode("utf-8", "replace")


def generate(prompt: str, max_tokens: int) -> list[int]:
    """The token ids the engine produces for ``prompt``."""
    state = text_state(prompt)
    out = []
    for _ in range(max_tokens):
        tid = next_token(state)
        out.append(tid)
        state = extend_state(state, tid)
    return out


def count_prompt_tokens(prompt: str) -> int:
    """Whitespace "tokenizer" for usage accounting (at least one token per prompt)."""
    return max(1, len(prompt.split()))


def expected_completion(prompt: str, max_tokens: int) -> str:
    """The full text the engine produces for ``prompt`` (tests use it as the oracle)."""
    return "".join(token_text(t) for t in generate(prompt, max_tokens))


# -- chat template ---------------------------------------------------------------------------------
def render_message(role: str, text: str) -> str:
    return f"{role}: {text}"


def chat_prompt(messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True,
                continue_final_message: bool = False) -> str:
    """The prompt of (role, text) messages, one ``role: text`` line each; the generation prompt is an
    open assistant line (``assistant: ``), and ``continue_final_message`` leaves the last (assistant)
    message open instead, as vLLM's flags of the same names do. An assistant reply continued from
    its partial content therefore renders exactly as the uninterrupted prompt plus that content."""
    prompt = "\n".join(render_message(role, text) for role, text in messages)
    if add_generation_prompt and not continue_final_message:
        prompt += "\n" + render_message("assistant", "")
    return prompt


def expected_chat_completion(messages: Sequence[Mapping[str, Any]], max_tokens: int) -> str:
    """The assistant content the engine produces for string-content ``messages`` (the tests' oracle)."""
    return expected_completion(chat_prompt([(m["role"], m["content"]) for m in messages]), max_tokens)
