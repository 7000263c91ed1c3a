"""The per-request log adapter: the ids lead every message and are record attributes too."""

from __future__ import annotations

import logging

import pytest

from motor.coordinator.request_log import RequestLog
from motor.coordinator.routing import Route


def test_ids_lead_every_message_and_are_record_attributes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="motor.coordinator.test")
    rlog = RequestLog(logging.getLogger("motor.coordinator.test"), "req-1%s")
    rlog.info("%s refused: %s", "/v1/completions", "bad body")
    rlog.routed(Route(3, 1, "127.0.0.1", 8000, "m")).warning("attempt %d failed", 2)
    first, second = caplog.records
    assert first.getMessage() == "request_id=req-1%s /v1/completions refused: bad body"
    assert second.getMessage() == "request_id=req-1%s instance=3 rank=1 attempt 2 failed"
    assert (first.request_id, getattr(first, "instance", None)) == ("req-1%s", None)  # type: ignore[attr-defined]
    assert (second.request_id, second.instance, second.rank) == ("req-1%s", 3, 1)  # type: ignore[attr-defined]
