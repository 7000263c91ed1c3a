"""Where each original DP rank lives: its endpoint (address, headless or not) and the pod, with its
NodeManager, that hosts it. Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EndpointInfo:
    rank: int
    ip: str
    headless: bool


@dataclass(frozen=True)
class PodInfo:
    pod_ip: str
    node_manager_address: str
    ranks: tuple[int, ...]
