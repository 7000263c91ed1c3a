"""Free TCP ports on a given (loopback) address, for tests and local launchers.

The port is free when returned; nothing reserves it afterwards, so use it promptly.
"""

from __future__ import annotations

import socket


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
