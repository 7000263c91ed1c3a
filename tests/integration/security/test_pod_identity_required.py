"""`security.require_pod_identity`: a NodeManager certificate without a pod URI (one shared by
NodeManagers) is refused at Register by a real mTLS Controller, by default in production mode and
when set in test mode; the same certificate is taken by a test-mode Controller by default, and a
pod's own certificate is taken in production mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from gen.motor.v1 import controller_pb2_grpc
from motor.common.grpc_server import open_channel
from motor.common.pki import DevPki, create_dev_pki
from motor.common.security import Role
from motor.controller.identity import require_pod_identity

from ..nodemanager.nm_helpers import rpc_error
from .mtls_controller import mtls_controller
from .test_identity_attacks import _tls, register_request

pytestmark = pytest.mark.timeout(60)

POD_IP = "127.0.0.1"


@pytest.fixture
def pki(tmp_path: Path) -> DevPki:
    # Without pods: the one `nodemanager` certificate every NodeManager would share (no pod URI).
    return create_dev_pki(tmp_path / "pki", ["localhost", POD_IP])


async def _register(pki: DevPki, name: str, refused: bool, security: dict[str, Any] | None = None,
                    **extra: Any):  # noqa: ANN202
    config = {"security": {**pki.security(Role.CONTROLLER), **(security or {})}, **extra}
    async with mtls_controller(pki, **config) as (service, info):
        assert require_pod_identity(service.config) is (refused or extra.get("mode") == "production")
        async with open_channel(f"127.0.0.1:{info['grpc_port']}", _tls(pki, name)) as channel:
            call = controller_pb2_grpc.ControllerStub(channel).Register(
                register_request(POD_IP, 0, f"{POD_IP}:50061"), timeout=5)
            if not refused:
                return (await call).accepted
            err = await rpc_error(call)
        refused = service.core.metrics.registry.get_sample_value(
            "motor_controller_identity_refusals_total", {"method": "Register", "reason": "no_pod_identity"})
        return err, refused


@pytest.mark.parametrize("extra", [{"mode": "production"}, {"security": {"require_pod_identity": True}}],
                         ids=["production-default", "test-mode-set"])
async def test_a_certificate_without_a_pod_uri_is_refused_at_register(pki: DevPki, extra: dict[str, Any]) -> None:
    err, refused = await _register(pki, Role.NODEMANAGER.value, True, **extra)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "has no pod URI spiffe://motor/ns/<namespace>/pod/<name>" in err.details()
    assert "security.require_pod_identity" in err.details()
    assert refused == 1


async def test_test_mode_takes_the_shared_certificate_by_default(pki: DevPki) -> None:
    assert await _register(pki, Role.NODEMANAGER.value, False) is True


async def test_production_takes_a_pods_own_certificate(tmp_path: Path) -> None:
    pki = create_dev_pki(tmp_path / "pods", ["localhost", "127.0.0.1"], pods=[("a", POD_IP)])
    assert await _register(pki, pki.pod_name("a"), False, mode="production") is True
