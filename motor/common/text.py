"""Bounded renderings of untrusted values for error messages and logs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def shorten(value: Any, limit: int = 80) -> str:
    """`repr(value)` (a str as itself) cut to `limit` characters, so an error can quote a bad value
    without echoing an arbitrarily large body."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rank_ranges(ranks: Iterable[int]) -> str:
    """Ranks as compact ranges, e.g. [0, 2-7, 9] (bounded log lines at any DP size)."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return "[" + ", ".join(out) + "]"
