"""Bounded renderings of untrusted values for error messages and logs."""

from __future__ import annotations

from typing import Any


def shorten(value: Any, limit: int = 80) -> str:
    """`repr(value)` (a str as itself) cut to `limit` characters, so an error can quote a bad value
    without echoing an arbitrarily large body."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
