"""--event-loop: the Coordinator runs on uvloop where it is installed (auto), every service can be
told asyncio (the flag or MOTOR_EVENT_LOOP), and the others keep asyncio by default."""

from __future__ import annotations

import importlib.util

import pytest

from motor.common import service
from motor.common.service import base_arg_parser, resolve_event_loop, run_loop
from motor.coordinator import main as coordinator_main


def _parser_of_coordinator(monkeypatch: pytest.MonkeyPatch):
    captured = {}

    def fake_run_service(label, build, parser, argv=None):
        captured["parser"] = parser
        return 0

    monkeypatch.setattr(coordinator_main, "run_service", fake_run_service)
    coordinator_main.main([])
    return captured["parser"]


def test_auto_is_uvloop_where_installed_and_asyncio_where_not(monkeypatch: pytest.MonkeyPatch) -> None:
    assert importlib.util.find_spec("uvloop") is not None, "uvloop is a Linux dependency of the project"
    assert resolve_event_loop("auto") == "uvloop"
    monkeypatch.setattr(service.importlib.util, "find_spec", lambda name: None)
    assert resolve_event_loop("auto") == "asyncio"
    assert resolve_event_loop("asyncio") == "asyncio"
    with pytest.raises(ValueError, match="'libev'"):
        resolve_event_loop("libev")


def test_the_coordinator_defaults_to_auto_and_the_flag_or_the_environment_turns_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOTOR_EVENT_LOOP", raising=False)
    parser = _parser_of_coordinator(monkeypatch)
    assert parser.parse_args([]).event_loop == "auto"
    assert parser.parse_args(["--event-loop", "asyncio"]).event_loop == "asyncio"
    monkeypatch.setenv("MOTOR_EVENT_LOOP", "asyncio")
    assert _parser_of_coordinator(monkeypatch).parse_args([]).event_loop == "asyncio"
    monkeypatch.delenv("MOTOR_EVENT_LOOP")
    assert base_arg_parser("motor-controller", "").parse_args([]).event_loop == "asyncio"


def test_run_loop_runs_the_coroutine_on_the_loop_chosen() -> None:
    async def loop_module() -> str:
        import asyncio

        return type(asyncio.get_running_loop()).__module__

    assert run_loop(loop_module(), "auto").startswith("uvloop")
    assert run_loop(loop_module(), "asyncio").startswith("asyncio")
