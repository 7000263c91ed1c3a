"""The config loader and RFC §7 keys: defaults, derived values, files and overrides, and every refusal
naming its key and value (through the Controller's model, which holds every shared section)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from motor.common.config.fault_tolerance import MAX_GUARD_LEASE_SEC, FaultToleranceConfig
from motor.common.config.loader import ConfigError, load_config, parse_override
from motor.controller.config import ControllerConfig


def test_fault_tolerance_defaults_are_the_rfc_ones() -> None:
    ft = ControllerConfig().fault_tolerance_config
    assert ft.enable_fault_tolerance is True
    assert ft.enable_dp_scale_down is False
    assert ft.enable_dp_scale_up is False
    assert ft.enable_dp_scale_down_proxy is False
    c = ft.dp_scale_down_config
    assert (c.request_timeout_sec, c.poll_interval_sec, c.execution_deadline_sec) == (5.0, 1.0, 30.0)
    assert ft.hardware_ft_correlation_window_sec == 5.0
    assert ft.strategy_center_check_interval == 10.0
    assert ft.software_status_collection_timeout_sec == 60.0
    assert ft.engine_status_poll_interval_sec == 1.0


def test_guard_lease_from_rfc_defaults_is_85_sec() -> None:
    assert FaultToleranceConfig().guard_lease_sec == 85.0


def test_guard_lease_uses_poll_interval_when_above_five() -> None:
    ft = FaultToleranceConfig.model_validate({"dp_scale_down_config": {"poll_interval_sec": 7.0}})
    assert ft.guard_lease_sec == 2 * 30 + 4 * 5 + 7


@pytest.mark.parametrize(
    ("ft", "scale_down", "proxy"),
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
)
def test_proxy_is_derived(ft: bool, scale_down: bool, proxy: bool) -> None:
    cfg = FaultToleranceConfig.model_validate({"enable_fault_tolerance": ft, "enable_dp_scale_down": scale_down})
    assert cfg.enable_dp_scale_down_proxy is proxy


def _refused(model, data) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(model, None, list(_flatten(data)))
    message = str(info.value)
    assert "\n" not in message
    return message


def _flatten(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"fault_tolerance_config": {"enable_dp_scale_down": "yes"}}, "fault_tolerance_config.enable_dp_scale_down='yes'"),
        ({"fault_tolerance_config": {"enable_fault_tolerance": 1}}, "fault_tolerance_config.enable_fault_tolerance=1"),
        (
            {"fault_tolerance_config": {"dp_scale_down_config": {"request_timeout_sec": -1}}},
            "fault_tolerance_config.dp_scale_down_config.request_timeout_sec=-1",
        ),
        (
            {"fault_tolerance_config": {"dp_scale_down_config": {"poll_interval_sec": 0}}},
            "fault_tolerance_config.dp_scale_down_config.poll_interval_sec=0",
        ),
        (
            {"fault_tolerance_config": {"dp_scale_down_config": {"execution_deadline_sec": "30"}}},
            "fault_tolerance_config.dp_scale_down_config.execution_deadline_sec='30'",
        ),
        (
            {"fault_tolerance_config": {"hardware_ft_correlation_window_sec": -5}},
            "fault_tolerance_config.hardware_ft_correlation_window_sec=-5",
        ),
        (
            {"fault_tolerance_config": {"strategy_center_check_interval": 0}},
            "fault_tolerance_config.strategy_center_check_interval=0",
        ),
        (
            {"fault_tolerance_config": {"software_status_collection_timeout_sec": -1.5}},
            "fault_tolerance_config.software_status_collection_timeout_sec=-1.5",
        ),
        ({"fault_tolerance_config": {"enable_dp_scale_downn": True}}, "fault_tolerance_config.enable_dp_scale_downn=True: unknown key"),
        ({"fault_tolerance_config": {"enable_dp_scale_down_proxy": True}}, "enable_dp_scale_down_proxy=True cannot be set"),
        ({"bogus": 1}, "bogus=1: unknown key"),
        ({"server": {"port": 70000}}, "server.port=70000"),
        ({"server": {"port": "50051"}}, "server.port='50051'"),
        ({"server": {"host": ""}}, "server.host=''"),
        ({"store": {"etcd_endpoints": ["localhost"]}}, "'localhost' is not host:port"),
        ({"store": {"key_prefix": "motor"}}, "store.key_prefix='motor'"),
        ({"coordinator_address": "nope"}, "coordinator_address='nope'"),
        ({"heartbeat_interval_sec": 20}, "heartbeat_timeout_sec=10 must exceed heartbeat_interval_sec=20"),
        ({"heartbeat_quiet_interval_sec": 1}, "heartbeat_quiet_interval_sec=1 must lie between heartbeat_interval_sec=2"),
        ({"heartbeat_quiet_interval_sec": 6}, "heartbeat_quiet_interval_sec=6 must lie between"),
        ({"heartbeat_quiet_interval_sec": -1}, "heartbeat_quiet_interval_sec=-1"),
        ({"server": {"tls": {"cert_file": "/nonexistent/c.pem", "key_file": "/nonexistent/k.pem"}}}, "cert_file='/nonexistent/c.pem'"),
    ],
)
def test_controller_bad_values_are_refused_with_key_named(data: dict, named: str) -> None:
    assert named in _refused(ControllerConfig, data)


def test_the_heartbeat_quiet_interval_defaults_to_a_third_of_the_timeout_and_0_turns_it_off() -> None:
    assert ControllerConfig().quiet_interval_sec == pytest.approx(10 / 3)
    assert ControllerConfig(heartbeat_interval_sec=4.0).quiet_interval_sec == 4.0
    assert ControllerConfig(heartbeat_quiet_interval_sec=4.0).quiet_interval_sec == 4.0
    assert ControllerConfig(heartbeat_quiet_interval_sec=0).quiet_interval_sec == 0.0


def test_lease_bound_violation_is_refused() -> None:
    message = _refused(
        ControllerConfig,
        {"fault_tolerance_config": {"dp_scale_down_config": {"execution_deadline_sec": 2000.0}}},
    )
    assert "guard lease" in message and "execution_deadline_sec=2000" in message and "3600" in message


# Every RFC §7 timer and the fault-tolerance keys beside it, with its upper bound.
FT_BOUNDS = [
    ("dp_scale_down_config.request_timeout_sec", 60.0),
    ("dp_scale_down_config.poll_interval_sec", 10.0),
    ("dp_scale_down_config.execution_deadline_sec", 1675.0),
    ("hardware_ft_correlation_window_sec", 60.0),
    ("strategy_center_check_interval", 300.0),
    ("software_status_collection_timeout_sec", 600.0),
    ("engine_status_poll_interval_sec", 60.0),
    ("idle_fault_probe_timeout_sec", 30.0),
]


@pytest.mark.parametrize(("key", "bound"), FT_BOUNDS)
def test_every_fault_tolerance_timer_is_refused_above_its_bound_naming_key_value_and_bound(
        key: str, bound: float) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(ControllerConfig, None, [(f"fault_tolerance_config.{key}", bound + 1)])
    message = str(info.value)
    assert f"fault_tolerance_config.{key}={bound + 1!r}" in message and f"{bound:g}" in message, message


@pytest.mark.parametrize(("key", "bound"), FT_BOUNDS)
def test_every_fault_tolerance_timer_is_accepted_at_its_bound(key: str, bound: float) -> None:
    load_config(ControllerConfig, None, [(f"fault_tolerance_config.{key}", bound)])


def test_a_601_sec_collection_timeout_is_refused() -> None:
    message = _refused(ControllerConfig, {"fault_tolerance_config": {"software_status_collection_timeout_sec": 601.0}})
    assert "fault_tolerance_config.software_status_collection_timeout_sec=601.0" in message and "600" in message


@given(
    deadline=st.floats(min_value=1e-3, max_value=1675.0),
    request=st.floats(min_value=1e-3, max_value=60.0),
    poll=st.floats(min_value=1e-3, max_value=10.0),
)
def test_every_accepted_round_timer_combination_derives_a_lease_the_nodemanagers_accept(
        deadline: float, request: float, poll: float) -> None:
    ft = FaultToleranceConfig.model_validate({"dp_scale_down_config": {
        "execution_deadline_sec": deadline, "request_timeout_sec": request, "poll_interval_sec": poll}})
    assert 0 < ft.guard_lease_sec <= MAX_GUARD_LEASE_SEC


def test_the_round_timers_at_their_bounds_derive_exactly_the_lease_bound() -> None:
    ft = FaultToleranceConfig.model_validate({"dp_scale_down_config": {
        "execution_deadline_sec": 1675.0, "request_timeout_sec": 60.0, "poll_interval_sec": 10.0}})
    assert ft.guard_lease_sec == MAX_GUARD_LEASE_SEC == 3600.0


def test_file_and_overrides_compose(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("fault_tolerance_config:\n  enable_dp_scale_down: true\nserver:\n  port: 1234\n")
    cfg = load_config(ControllerConfig, path, [parse_override("server.port=0")])
    assert cfg.fault_tolerance_config.enable_dp_scale_down_proxy is True
    assert cfg.server.port == 0


def test_json_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"fault_tolerance_config": {"dp_scale_down_config": {"poll_interval_sec": 0.5}}}')
    cfg = load_config(ControllerConfig, path)
    assert cfg.fault_tolerance_config.dp_scale_down_config.poll_interval_sec == 0.5


@pytest.mark.parametrize(("text", "named"), [("- 1\n- 2\n", "must hold a mapping"), ("a: [\n", "is not YAML/JSON")])
def test_malformed_files_are_refused(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(ControllerConfig, path)
    assert named in str(info.value) and str(path) in str(info.value)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read --config"):
        load_config(ControllerConfig, tmp_path / "absent.yaml")


@pytest.mark.parametrize("item", ["novalue", "=3", "a..b=1"])
def test_malformed_overrides_are_refused(item: str) -> None:
    with pytest.raises(ConfigError):
        load_config(ControllerConfig, None, [parse_override(item)])


def test_config_is_frozen() -> None:
    cfg = ControllerConfig()
    with pytest.raises(Exception):
        cfg.heartbeat_interval_sec = 3.0  # type: ignore[misc]
