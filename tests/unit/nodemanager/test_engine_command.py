"""Engine argv templates: the reference-engine default and a configured command."""

from __future__ import annotations

import sys

import pytest

from motor.sim.config import parse_config
from nodemanager.config import NodeManagerConfig
from nodemanager.engine_command import engine_argv, fill_template

BASE = {"controller_address": "127.0.0.1:1", "instance_id": 3, "dp_size": 4, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 2}, {"dp_rank": 3}]}


def test_default_is_the_reference_engine_with_its_real_flags() -> None:
    cfg = NodeManagerConfig.model_validate({**BASE, "model": "m1", "ft_capability": {"num_redundant_experts": 4},
                                            "engine_extra_args": ["--num-experts", "4"]})
    argv = engine_argv(cfg, dp_rank=2, port=8002, dp_master_ip="127.0.0.5", dp_master_port=29555)
    assert argv[:3] == [sys.executable, "-m", "motor.sim.main"]
    sim = parse_config(argv[3:])  # the sim's own parser accepts every flag
    assert (sim.dp_rank, sim.dp_size, sim.host, sim.port) == (2, 4, "127.0.0.2", 8002)
    assert (sim.dp_master_ip, sim.dp_master_port, sim.model) == ("127.0.0.5", 29555, "m1")
    assert sim.enable_fault_tolerance and sim.ft_api_prefix == "/v1/fault_tolerance"
    assert (sim.num_experts, sim.num_redundant_experts) == (4, 4)


def test_default_without_engine_ft_has_no_ft_flag() -> None:
    cfg = NodeManagerConfig.model_validate({**BASE, "ft_capability": {"engine_ft_enabled": False}})
    assert "--enable-fault-tolerance" not in engine_argv(cfg, dp_rank=3, port=1, dp_master_ip="127.0.0.1",
                                                         dp_master_port=2)


def test_configured_command_fills_placeholders() -> None:
    cfg = NodeManagerConfig.model_validate({
        **BASE, "engine_ft_api_prefix": "/fault_tolerance",
        "engine_command": ["vllm", "serve", "{model}", "--data-parallel-rank", "{dp_rank}",
                           "--data-parallel-address={dp_master_ip}:{dp_master_port}", "--port", "{port}",
                           "--literal={{x}}"],
        "engine_extra_args": ["--ft-prefix", "{ft_api_prefix}"],
    })
    assert engine_argv(cfg, dp_rank=3, port=9, dp_master_ip="10.0.0.1", dp_master_port=7) == [
        "vllm", "serve", "motor-sim", "--data-parallel-rank", "3", "--data-parallel-address=10.0.0.1:7",
        "--port", "9", "--literal={x}", "--ft-prefix", "/fault_tolerance"]


def test_fill_template_names_the_bad_item() -> None:
    with pytest.raises(ValueError, match="'{nope}'"):
        fill_template(["{nope}"], {})


def test_a_joiner_gets_join_last_and_everything_else_as_a_normal_launch() -> None:
    cfg = NodeManagerConfig.model_validate(BASE)
    normal = engine_argv(cfg, dp_rank=3, port=8003, dp_master_ip="127.0.0.5", dp_master_port=29555)
    joiner = engine_argv(cfg, dp_rank=3, port=8003, dp_master_ip="127.0.0.5", dp_master_port=29555, join=True)
    assert joiner == [*normal, "--join"] and "--join" not in normal
