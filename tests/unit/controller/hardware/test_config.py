"""The controller's `hardware_monitor` settings: defaults and refusals naming the key."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, build_config, load_config
from motor.controller.config import ControllerConfig, HardwareMonitorConfig


def test_defaults() -> None:
    cfg = ControllerConfig().hardware_monitor
    assert cfg == HardwareMonitorConfig()
    assert (cfg.configmap_dir, cfg.poll_interval_sec, cfg.kubernetes) == (None, 2.0, "auto")


def test_values_from_overrides() -> None:
    cfg = load_config(ControllerConfig, overrides=[
        ("hardware_monitor.configmap_dir", "/etc/mindx-dl/deviceinfo"),
        ("hardware_monitor.poll_interval_sec", 0.5),
        ("hardware_monitor.kubernetes", "off"),
    ]).hardware_monitor
    assert (cfg.configmap_dir, cfg.poll_interval_sec, cfg.kubernetes) == ("/etc/mindx-dl/deviceinfo", 0.5, "off")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"kubernetes": "maybe"}, "hardware_monitor.kubernetes='maybe'"),
        ({"poll_interval_sec": 0}, "hardware_monitor.poll_interval_sec=0"),
        ({"poll_interval_sec": -1.0}, "hardware_monitor.poll_interval_sec=-1.0"),
        ({"configmap_dir": "  "}, "hardware_monitor.configmap_dir='  '"),
        ({"configmap_dir": 3}, "hardware_monitor.configmap_dir=3"),
        ({"watch": True}, "hardware_monitor.watch=True: unknown key"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data, needle) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(ControllerConfig, {"hardware_monitor": data})
    assert needle in str(info.value)
