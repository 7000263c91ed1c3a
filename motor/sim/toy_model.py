"""Deterministic toy "model": tokens derived from the prompt (pure, shared by API and executor).

Same prompt -> same output on every rank and every run, so tests can compare answers across
ranks and before/after a scale-down.
"""

from __future__ import annotations

import hashlib

VOCAB: tuple[str, ...] = (
    "the", "expert", "rank", "token", "motor", "keeps", "serving", "while", "a", "peer",
    "fails", "and", "survivors", "rebuild", "their", "group", "with", "gloo", "over", "store",
    "data", "parallel", "wide", "mixture", "of", "experts", "route", "each", "step", "in",
    "lockstep", "wave", "scale", "down", "replica", "slot", "healthy", "ready", "fast", "quiet",
    "river", "stone", "light", "cloud", "north", "green", "blue", "amber", "seven", "eleven",
    "bright", "steady", "calm", "swift",
)


def prompt_seed(prompt: str) -> int:
    """64-bit seed of a prompt (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "big")


def token_id(seed: int, position: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % len(VOCAB)


def token_text(tid: int) -> str:
    return " " + VOCAB[tid]


def count_prompt_tokens(prompt: str) -> int:
    """Whitespace "tokenizer" for usage accounting (at least one token per prompt)."""
    return max(1, len(prompt.split()))


def expected_completion(prompt: str, max_tokens: int) -> str:
    """The full text the engine produces for ``prompt`` (tests use it as the oracle)."""
    seed = prompt_seed(prompt)
    return "".join(token_text(token_id(seed, i)) for i in range(max_tokens))
