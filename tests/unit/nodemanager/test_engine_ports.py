"""An engine's HTTP port is never the DP master's port on the same host: the master binds it only
once its group forms, so the kernel may well offer it as free to the NodeManager before that."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodemanager import supervisor as supervisor_module
from nodemanager.config import NodeManagerConfig
from nodemanager.supervisor import ProcessSupervisor


def _supervisor(tmp_path: Path) -> ProcessSupervisor:
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 2, "pod_ip": "127.0.0.2",
        "engines": [{"dp_rank": 0}, {"dp_rank": 1}], "log_dir": str(tmp_path),
    })
    return ProcessSupervisor(cfg, tmp_path, on_ready=lambda i, run: None, on_exit=lambda ev: None)


def test_the_masters_port_offered_as_free_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offered = iter([41443, 41443, 41500])
    monkeypatch.setattr(supervisor_module, "listen_port", lambda host: next(offered))
    slot = _supervisor(tmp_path).slot(0)
    assert slot.host == "127.0.0.2"
    assert _supervisor(tmp_path)._choose_port(slot, taken=41443) == 41500


def test_a_kept_port_that_is_the_masters_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor_module, "listen_port", lambda host: 41500)
    monkeypatch.setattr(supervisor_module, "port_free", lambda host, port: True)
    slot = _supervisor(tmp_path).slot(0)
    slot.port = 41443
    assert _supervisor(tmp_path)._choose_port(slot, taken=41443) == 41500
    assert _supervisor(tmp_path)._choose_port(slot, taken=0) == 41443
