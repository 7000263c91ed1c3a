"""The Coordinator's own config keys: defaults and refusals naming the key."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, build_config
from motor.coordinator.config import CoordinatorConfig


def test_defaults() -> None:
    cfg = CoordinatorConfig()
    assert cfg.management_key is None
    assert (cfg.max_retries, cfg.retry_after_sec) == (2, 1)
    assert cfg.endpoint_cooldown_sec == 2.0
    assert (cfg.upstream_connect_timeout_sec, cfg.upstream_timeout_sec) == (2.0, 600.0)


def test_zero_cooldown_is_allowed() -> None:
    assert build_config(CoordinatorConfig, {"endpoint_cooldown_sec": 0}).endpoint_cooldown_sec == 0


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"endpoint_cooldown_sec": -0.5}, "endpoint_cooldown_sec=-0.5"),
        ({"endpoint_cooldown_sec": 4000}, "endpoint_cooldown_sec=4000"),
        ({"endpoint_cooldown_sec": "2s"}, "endpoint_cooldown_sec='2s'"),
        ({"management_key": "   "}, "management_key is blank"),
        ({"management_key": ""}, "management_key is blank"),
        ({"upstream_connect_timeout_sec": 5.0, "upstream_timeout_sec": 3.0},
         "upstream_connect_timeout_sec=5 exceeds upstream_timeout_sec=3"),
        ({"retry_after_sec": 0}, "retry_after_sec=0"),
        ({"max_retries": 17}, "max_retries=17"),
        ({"max_retries": -1}, "max_retries=-1"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(CoordinatorConfig, data)
    assert named in str(info.value)


def test_a_set_management_key_is_kept_verbatim() -> None:
    assert build_config(CoordinatorConfig, {"management_key": "k y"}).management_key == "k y"
