"""--event-loop: the Coordinator and the Controller run on uvloop where it is installed (auto), every
service can be told asyncio (the flag or MOTOR_EVENT_LOOP), and the NodeManager keeps asyncio by default."""

from __future__ import annotations

import importlib.util

import pytest

from motor.common import service
from motor.common.service import resolve_event_loop, run_loop
from motor.controller import main as controller_main
from motor.coordinator import main as coordinator_main
from nodemanager import main as nodemanager_main


def _parser_of(main_module, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001
    captured = {}

    def fake_run_service(label, build, parser, argv=None):
        captured["parser"] = parser
        return 0

    monkeypatch.setattr(main_module, "run_service", fake_run_service)
    main_module.main([])
    return captured["parser"]


def test_auto_is_uvloop_where_installed_and_asyncio_where_not(monkeypatch: pytest.MonkeyPatch) -> None:
    assert importlib.util.find_spec("uvloop") is not None, "uvloop is a Linux dependency of the project"
    assert resolve_event_loop("auto") == "uvloop"
    monkeypatch.setattr(service.importlib.util, "find_spec", lambda name: None)
    assert resolve_event_loop("auto") == "asyncio"
    assert resolve_event_loop("asyncio") == "asyncio"
    with pytest.raises(ValueError, match="'libev'"):
        resolve_event_loop("libev")


@pytest.mark.parametrize("main_module", [coordinator_main, controller_main], ids=["coordinator", "controller"])
def test_the_coordinator_and_the_controller_default_to_auto_and_the_flag_or_the_environment_turns_it_off(
        monkeypatch: pytest.MonkeyPatch, main_module) -> None:  # noqa: ANN001
    monkeypatch.delenv("MOTOR_EVENT_LOOP", raising=False)
    parser = _parser_of(main_module, monkeypatch)
    assert parser.parse_args([]).event_loop == "auto"
    assert parser.parse_args(["--event-loop", "asyncio"]).event_loop == "asyncio"
    monkeypatch.setenv("MOTOR_EVENT_LOOP", "asyncio")
    assert _parser_of(main_module, monkeypatch).parse_args([]).event_loop == "asyncio"
    monkeypatch.delenv("MOTOR_EVENT_LOOP")
    assert _parser_of(nodemanager_main, monkeypatch).parse_args([]).event_loop == "asyncio"


def test_run_loop_runs_the_coroutine_on_the_loop_chosen() -> None:
    async def loop_module() -> str:
        import asyncio

        return type(asyncio.get_running_loop()).__module__

    assert run_loop(loop_module(), "auto").startswith("uvloop")
    assert run_loop(loop_module(), "asyncio").startswith("asyncio")
