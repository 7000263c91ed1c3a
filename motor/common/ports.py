"""TCP ports on a given (loopback or pod) address: free ones to pick, and whether one is free now.

The NodeManager picks engine ports with these; the local-cluster launcher and tests do too. A port
is free when checked; nothing reserves it afterwards, so use it promptly.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def free_port(ip: str = "127.0.0.1") -> int:
    return free_ports(1, ip)[0]


def free_ports(count: int, ip: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports on ``ip`` (all held open together, so they cannot repeat)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(_family(ip), socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((ip, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Where a server's port is picked below the ephemeral range: above the well-known and registered
# ports most hosts run, and below the local cluster's fixed ports (light engines from 17999, their
# stores from 21000) and its randomly placed store blocks (20000 on).
LISTEN_PORTS = range(10000, 17000)


def ephemeral_range() -> range:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def listen_port(ip: str, attempts: int = 64) -> int:
    """A free port on ``ip`` for a server that another process binds shortly (an engine's HTTP port,
    a DP group's store). Outgoing connections take their local ports from the ephemeral range, so a
    port picked there can be taken by one before the server binds it: this picks from
    ``LISTEN_PORTS`` when that lies below the range, and from the range only when none there is free."""
    band = LISTEN_PORTS
    if band.stop <= ephemeral_range().start:
        for _ in range(attempts):
            port = band.start + secrets.randbelow(len(band))
            if port_free(ip, port, ignore_time_wait=False):
                return port
    return free_port(ip)


def port_free(ip: str, port: int, *, ignore_time_wait: bool = True) -> bool:
    """Whether ``port`` on ``ip`` can be bound now.

    ``ignore_time_wait`` binds as HTTP servers do (SO_REUSEADDR), so connections of a previous
    server on the port that linger in TIME_WAIT do not count; without it any socket on the port,
    an outgoing connection's included, makes it busy (the stricter check for ports whose binder
    must not meet a leftover of any kind).
    """
    with socket.socket(_family(ip), socket.SOCK_STREAM) as sock:
        if ignore_time_wait:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True
