"""TCP ports on a given (loopback or pod) address: free ones to pick, and whether one is free now.

The NodeManager picks engine ports with these; the local-cluster launcher and tests do too. A port
is free when checked; nothing reserves it afterwards, so use it promptly.
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
