"""The argv of one local engine: a configurable template (real vLLM or the reference engine).

``engine_command`` items and ``engine_extra_args`` are ``str.format`` templates over the
placeholders of ``nodemanager.config.ENGINE_COMMAND_PLACEHOLDERS``; unset, the command is the
reference engine ``python -m motor.sim.main`` with its real flags. A joiner of an elastic scale-up
(docs/engine-protocol-scale-up.md) gets ``--join`` last: it loads, serves its API and waits for
the round's ``scale_up`` instead of forming a DP group.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from nodemanager.config import NodeManagerConfig


def default_engine_command(engine_ft_enabled: bool) -> list[str]:
    """motor-engine-sim, one DP rank in external-LB mode (see motor/sim/config.py for the flags)."""
    argv = [
        sys.executable, "-m", "motor.sim.main",
        "--dp-rank", "{dp_rank}", "--dp-size", "{dp_size}",
        "--dp-master-ip", "{dp_master_ip}", "--dp-master-port", "{dp_master_port}",
        "--host", "{host}", "--port", "{port}",
        "--model", "{model}", "--ft-api-prefix", "{ft_api_prefix}",
        "--num-redundant-experts", "{num_redundant_experts}",
    ]
    if engine_ft_enabled:
        argv.append("--enable-fault-tolerance")
    return argv


def fill_template(items: list[str], values: Mapping[str, object]) -> list[str]:
    out = []
    for item in items:
        try:
            out.append(item.format_map(values))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"engine command item {item!r} cannot be filled: {exc!r}") from None
    return out


JOIN_FLAG = "--join"


def engine_argv(config: NodeManagerConfig, *, dp_rank: int, port: int, dp_master_ip: str, dp_master_port: int,
                join: bool = False) -> list[str]:
    values = {
        "dp_rank": dp_rank,
        "dp_size": config.dp_size,
        "host": config.pod_ip,
        "port": port,
        "dp_master_ip": dp_master_ip,
        "dp_master_port": dp_master_port,
        "ft_api_prefix": config.engine_ft_api_prefix,
        "model": config.model,
        "num_redundant_experts": config.ft_capability.num_redundant_experts,
    }
    template = config.engine_command or default_engine_command(config.ft_capability.engine_ft_enabled)
    argv = fill_template([*template, *config.engine_extra_args], values)
    return [*argv, JOIN_FLAG] if join else argv
