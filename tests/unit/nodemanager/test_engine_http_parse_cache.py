"""An unchanged engine status answer is parsed once: the next identical answer returns the same entry
re-dated by the clock; a changed body, status or round id is parsed again, and a malformed answer
raises every time."""

from __future__ import annotations

import json

import pytest

from nodemanager.dialects.base import EngineDialect
from nodemanager.engine_answers import EngineStatusMalformed
from nodemanager.engine_http import EngineHttpClient


class CountingDialect(EngineDialect):
    def __init__(self) -> None:
        super().__init__(4)
        self.parses = 0

    def parse_status(self, endpoint_id, http_status, body, observed_at_unix_sec=0.0, request_id=""):
        self.parses += 1
        return super().parse_status(endpoint_id, http_status, body, observed_at_unix_sec, request_id)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now


def _body(status: str) -> bytes:
    return json.dumps({"schema_version": 1, "total_engines": 1, "engines": [{"id": 2, "status": status}]}).encode()


def test_unchanged_answer_is_parsed_once_and_redated() -> None:
    dialect, clock = CountingDialect(), Clock()
    http = EngineHttpClient("/v1/fault_tolerance", 1.0, clock, dialect=dialect)  # type: ignore[arg-type]
    first = http._parse(2, 200, _body("healthy"), "")
    clock.now = 101.5
    again = http._parse(2, 200, _body("healthy"), "")
    assert dialect.parses == 1
    assert (again.status, again.observed_at_unix_sec, first.observed_at_unix_sec) == ("healthy", 101.5, 100.0)
    changed = http._parse(2, 200, _body("unhealthy"), "")
    assert (dialect.parses, changed.status) == (2, "unhealthy")
    http._parse(2, 200, _body("unhealthy"), "round-1")
    assert dialect.parses == 3


def test_malformed_answer_raises_every_time() -> None:
    dialect = CountingDialect()
    http = EngineHttpClient("/v1/fault_tolerance", 1.0, Clock(), dialect=dialect)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(EngineStatusMalformed):
            http._parse(2, 500, b"oops", "")
    assert dialect.parses == 2
