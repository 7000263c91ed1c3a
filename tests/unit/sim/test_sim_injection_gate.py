"""The reference engine's fault injection is off by default, refused in production mode and on a
wildcard address (one line, exit 2), and the app refuses such a config built in code too."""

from __future__ import annotations

import dataclasses

import pytest

from motor.sim.config import injection_refusal, parse_config
from motor.sim.engine import SimEngine
from motor.sim.http_api import build_app


def test_injection_is_off_by_default_and_allowed_on_the_pod_address_in_test_mode() -> None:
    assert parse_config([]).enable_fault_injection is False
    cfg = parse_config(["--enable-fault-injection", "--host", "127.0.0.2"])
    assert cfg.mode == "test" and injection_refusal(cfg) is None


@pytest.mark.parametrize(("argv", "named"), [
    (["--enable-fault-injection", "--mode", "production"], "refused with --mode production"),
    (["--enable-fault-injection", "--host", "0.0.0.0"], "not '0.0.0.0'"),
    (["--enable-fault-injection", "--host", "::"], "not '::'"),
    (["--enable-fault-injection", "--host", "pod-a.example"], "not 'pod-a.example'"),
])
def test_injection_is_refused_with_one_line(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_config(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_production_mode_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOTOR_ENGINE_MODE", "production")
    assert parse_config([]).mode == "production"
    with pytest.raises(SystemExit):
        parse_config(["--enable-fault-injection"])


def test_the_app_refuses_a_production_config_built_in_code() -> None:
    cfg = dataclasses.replace(parse_config(["--enable-fault-injection"]), mode="production")
    with pytest.raises(ValueError, match="refused with --mode production"):
        build_app(SimEngine(cfg))
    routes = {r.resource.canonical for r in build_app(SimEngine(parse_config([]))).router.routes()}
    assert not any(path.startswith("/motor/admin") for path in routes)
