"""NodeManager config keys: defaults, and each refusal naming its key and value."""

from __future__ import annotations

import pytest

from motor.common.config.loader import ConfigError, load_config
from nodemanager.config import NodeManagerConfig

NM = {"controller_address": "127.0.0.1:50051", "instance_id": 7, "dp_size": 2,
      "engines": [{"dp_rank": 0}, {"dp_rank": 1}]}
NM_MINIMAL = {"controller_address": "127.0.0.1:50051", "instance_id": 7, "dp_size": 4,
              "engines": [{"dp_rank": 0}, {"dp_rank": 1}]}


def test_defaults() -> None:
    cfg = load_config(NodeManagerConfig, None, list(NM.items()))
    assert cfg.engine_command is None and cfg.engine_extra_args == [] and cfg.log_dir is None
    assert cfg.exit_when_all_engines_dead is False
    assert cfg.controller_request_timeout_sec == 5.0 and cfg.controller_retry_max_backoff_sec == 5.0
    assert cfg.fault_report_queue_size == 1024 and cfg.fault_report_attempts == 3
    assert cfg.fault_tolerance_config.engine_status_poll_interval_sec == 1.0
    assert cfg.fault_tolerance_config.enable_dp_scale_down_proxy is False


def test_valid_overrides() -> None:
    cfg = load_config(NodeManagerConfig, None, [*NM.items(), ("engine_command", ["vllm", "--port", "{port}"]),
                                                 ("engine_extra_args", ["--x={dp_rank}"]), ("log_dir", "/tmp/l"),
                                                 ("exit_when_all_engines_dead", True), ("dp_master_port", 0),
                                                 ("fault_report_attempts", 1)])
    assert cfg.engine_command == ["vllm", "--port", "{port}"] and cfg.dp_master_port == 0


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"engine_command": []}, "engine_command=[]"),
        ({"engine_command": ["run", "{gpu}"]}, "engine_command item '{gpu}' uses unknown placeholders ['gpu']"),
        ({"engine_command": ["run", "{port"]}, "is not a valid template"),
        ({"engine_extra_args": ["--a={}"]}, "engine_extra_args item '--a={}' uses unknown placeholders"),
        ({"engine_extra_args": "--x"}, "engine_extra_args='--x'"),
        ({"log_dir": "  "}, "log_dir='  '"),
        ({"exit_when_all_engines_dead": "yes"}, "exit_when_all_engines_dead='yes'"),
        ({"controller_request_timeout_sec": 0}, "controller_request_timeout_sec=0"),
        ({"controller_retry_max_backoff_sec": -1}, "controller_retry_max_backoff_sec=-1"),
        ({"fault_report_queue_size": 0}, "fault_report_queue_size=0"),
        ({"fault_report_attempts": 11}, "fault_report_attempts=11"),
        ({"fault_tolerance_config": {"engine_status_poll_interval_sec": 0}},
         "fault_tolerance_config.engine_status_poll_interval_sec=0"),
        ({"dp_master_port": 0, "dp_size": 4}, "dp_master_port=0 (pick a free port at launch) needs every rank"),
        ({"engine_ready_timeout_sec": -3}, "engine_ready_timeout_sec=-3"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(NodeManagerConfig, None, list({**NM, **data}.items()))
    assert named in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({}, "controller_address: Field required"),
        ({**NM_MINIMAL, "pod_ip": "pod-a"}, "pod_ip='pod-a'"),
        ({**NM_MINIMAL, "dp_size": 0}, "dp_size=0"),
        ({**NM_MINIMAL, "engines": [{"dp_rank": 0}, {"dp_rank": 0}]}, "repeat a rank"),
        ({**NM_MINIMAL, "engines": [{"dp_rank": 4}]}, "dp_rank [4] not below dp_size=4"),
        ({**NM_MINIMAL, "engines": [{"dp_rank": -1}]}, "engines.0.dp_rank=-1"),
        ({**NM_MINIMAL, "dp_store_port_base": 65534}, "dp_store_port_base=65534"),
        ({**NM_MINIMAL, "role": "both"}, "role='both'"),
        ({**NM_MINIMAL, "engine_ft_api_prefix": "v1/ft/"}, "engine_ft_api_prefix='v1/ft/'"),
        ({**NM_MINIMAL, "ft_capability": {"num_redundant_experts": -2}}, "ft_capability.num_redundant_experts=-2"),
    ],
)
def test_topology_and_field_refusals_name_the_key(data: dict, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(NodeManagerConfig, None, list(data.items()))
    assert named in str(info.value)
