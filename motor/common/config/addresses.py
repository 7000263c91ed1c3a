"""host:port addresses and hosts as configuration gives them."""

from __future__ import annotations


def parse_host_port(value: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' → (host, port); refuses anything else with the value named."""
    host, sep, port_text = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ValueError(f"address {value!r} is not host:port")
    return host, int(port_text)


def check_host_ports(value: str | list[str] | None) -> str | list[str] | None:
    """A field validator: every address given (one, a list, or none) is host:port."""
    for item in [value] if isinstance(value, str) else value or []:
        parse_host_port(item)
    return value


def check_host(value: str) -> str:
    """A field validator: a bind host is neither empty nor padded with spaces."""
    if not value or value != value.strip():
        raise ValueError(f"host {value!r} is empty or has spaces")
    return value
