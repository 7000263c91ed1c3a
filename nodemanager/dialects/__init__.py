"""The engine FT dialects Motor speaks, one module each, chosen by ``engine_ft_dialect`` (or detected
by ``motorctl engine-check``). See docs/engine-dialects.md."""

from __future__ import annotations

from nodemanager.dialects.base import (
    RETRY,
    SCALE_DOWN,
    SCALE_UP,
    ApplyAnswer,
    EngineDialect,
    FtCommand,
    UnsupportedInstruction,
)
from nodemanager.dialects.rfc import RfcDialect
from nodemanager.dialects.sglang import SglangDialect
from nodemanager.dialects.vllm import VllmDialect
from nodemanager.dialects.vllm_033 import Vllm033Dialect

DIALECTS: dict[str, type[EngineDialect]] = {
    d.name: d for d in (VllmDialect, Vllm033Dialect, RfcDialect, SglangDialect)
}


def make_dialect(name: str, dp_size: int, manager_address: tuple[str, int] | None = None) -> EngineDialect:
    try:
        cls = DIALECTS[name]
    except KeyError:
        raise ValueError(f"engine FT dialect {name!r} is not one of {sorted(DIALECTS)}") from None
    return cls(dp_size, manager_address)


def dialect_of(config) -> EngineDialect:
    """The dialect a NodeManagerConfig names (its manager address parsed)."""
    from motor.common.config.addresses import parse_host_port

    address = parse_host_port(config.engine_ft_manager_address) if config.engine_ft_manager_address else None
    return make_dialect(config.engine_ft_dialect, config.dp_size, address)


__all__ = ["dialect_of", "DIALECTS", "RETRY", "SCALE_DOWN", "SCALE_UP", "ApplyAnswer", "EngineDialect", "FtCommand",
           "UnsupportedInstruction", "make_dialect"]
