"""The posture rules of every service config (motor.common.config.posture): roles whenever TLS is on,
no plaintext off loopback without `insecure_plaintext`, and production mode's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from motor.common.config.loader import ConfigError, build_config
from motor.common.config.posture import is_loopback
from motor.common.config.posture import listeners as posture_listeners
from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.config import ControllerConfig
from motor.coordinator.config import CoordinatorConfig
from nodemanager.config import NodeManagerConfig

NM = {"controller_address": "127.0.0.1:1", "instance_id": 1, "engines": [{"dp_rank": 0, "port": 0}], "dp_size": 1}
SERVICES = [(ControllerConfig, {}, Role.CONTROLLER), (CoordinatorConfig, {}, Role.COORDINATOR),
            (NodeManagerConfig, NM, Role.NODEMANAGER)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return create_dev_pki(tmp_path_factory.mktemp("pki"))


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.1.0.7", "motor.svc"))


@pytest.mark.parametrize(("model", "base", "role"), SERVICES)
def test_every_non_loopback_listener_without_security_is_refused(model, base, role, pki: DevPki) -> None:
    listeners = [key.removesuffix(".host") for key, _ in posture_listeners(build_config(model, base))]
    assert "server" in listeners and len(listeners) == 2, listeners
    for name in listeners:
        data = {**base, name: {"host": "0.0.0.0"}}
        with pytest.raises(ConfigError, match=rf"^invalid configuration: {name}\.host='0\.0\.0\.0' is not a loopback "
                                              r"address and there is no `security`.*insecure_plaintext: true"):
            build_config(model, data)
        assert build_config(model, {**data, "insecure_plaintext": True}).insecure_plaintext
        assert build_config(model, {**data, "security": pki.security(role)}).security is not None
    assert build_config(model, base).mode == "test"  # loopback plaintext: the demo's


@pytest.mark.parametrize(("model", "base", "role"), SERVICES)
def test_tls_without_client_certificates_is_refused(model, base, role, pki: DevPki) -> None:
    tls = {"cert_file": str(pki.cert_file(role)), "key_file": str(pki.key_file(role))}
    with pytest.raises(ConfigError, match="server.tls.require_client_auth=false: roles are mandatory whenever TLS"):
        build_config(model, {**base, "server": {"tls": tls}})
    mtls = {**tls, "client_ca_file": str(pki.ca_file), "require_client_auth": True}
    assert build_config(model, {**base, "server": {"tls": mtls}}).server.tls.require_client_auth


@pytest.mark.parametrize(("model", "base", "role"), SERVICES)
def test_production_mode_refuses_plaintext(model, base, role, pki: DevPki) -> None:
    with pytest.raises(ConfigError, match="mode=production refuses plaintext: set `security`"):
        build_config(model, {**base, "mode": "production"})
    with pytest.raises(ConfigError, match="mode=production refuses plaintext"):
        build_config(model, {**base, "mode": "production", "insecure_plaintext": True})
    with pytest.raises(ConfigError, match="mode=production refuses insecure_plaintext=true"):
        build_config(model, {**base, "mode": "production", "insecure_plaintext": True,
                             "security": pki.security(role)})
    config = build_config(model, {**base, "mode": "production", "server": {"host": "0.0.0.0"},
                                  "security": pki.security(role)})
    assert config.mode == "production"


@pytest.mark.parametrize(("extra", "named"), [
    ({"fault_injection": {"enabled": True, "guard_delay_sec": 1.0}},
     "fault_injection.enabled=True, fault_injection.guard_delay_sec=1.0"),
    ({"fault_injection": {"enabled": True, "apply_delay_sec": 0.5, "finalize_delay_sec": 2.0}},
     "fault_injection.enabled=True, fault_injection.apply_delay_sec=0.5, fault_injection.finalize_delay_sec=2.0"),
    ({"engine_extra_args": ["--enable-fault-injection"]}, "engine_extra_args has --enable-fault-injection"),
    ({"engine_command": ["motor-engine-sim", "--enable-fault-injection"]}, "engine_command has --enable-fault-injection"),
])
def test_production_mode_refuses_fault_injection_and_test_delays(extra: dict, named: str, pki: DevPki) -> None:
    data = {**NM, **extra, "security": pki.security(Role.NODEMANAGER)}
    assert build_config(NodeManagerConfig, data).mode == "test"
    with pytest.raises(ConfigError, match=f"mode=production refuses fault injection and test delays: {named}$"):
        build_config(NodeManagerConfig, {**data, "mode": "production"})


def test_a_config_file_path_is_not_needed_for_the_checks(tmp_path: Path) -> None:
    # The refusal comes from the model: the same line whether the keys came from a file or --set.
    from motor.common.config.loader import load_config

    path = tmp_path / "c.yaml"
    path.write_text("server:\n  host: 0.0.0.0\n")
    with pytest.raises(ConfigError, match="server.host='0.0.0.0'"):
        load_config(ControllerConfig, path)
    assert load_config(ControllerConfig, path, [("insecure_plaintext", True)]).server.host == "0.0.0.0"
