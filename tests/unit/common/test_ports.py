"""A port picked for a server that binds it later lies below the kernel's ephemeral range, where no
outgoing connection can take it first; the range itself only when nothing below is free."""

from __future__ import annotations

import pytest

from motor.common import ports


def test_a_listen_port_is_picked_below_the_ephemeral_range_skipping_busy_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[int] = []

    def free(ip: str, port: int, *, ignore_time_wait: bool = True) -> bool:
        assert ip == "127.0.0.2" and ignore_time_wait is False  # any socket on it makes it busy
        checked.append(port)
        return len(checked) == 3

    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(32768, 61000))
    monkeypatch.setattr(ports, "port_free", free)
    monkeypatch.setattr(ports, "free_port", lambda ip: pytest.fail("picked from the ephemeral range"))
    port = ports.listen_port("127.0.0.2")
    assert port == checked[-1] and len(checked) == 3
    assert all(p in ports.LISTEN_PORTS for p in checked)


def test_the_ephemeral_range_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "free_port", lambda ip: 45000)
    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(32768, 61000))
    monkeypatch.setattr(ports, "port_free", lambda ip, port, ignore_time_wait=True: False)
    assert ports.listen_port("127.0.0.2", attempts=5) == 45000
    # A range that starts below the band leaves no room under it.
    monkeypatch.setattr(ports, "ephemeral_range", lambda: range(1024, 65536))
    monkeypatch.setattr(ports, "port_free", lambda ip, port, ignore_time_wait=True: pytest.fail("no band"))
    assert ports.listen_port("127.0.0.2") == 45000

