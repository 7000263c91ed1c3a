"""A Controller with mTLS and roles on port 0 (the dev PKI's controller certificate), for the
security tests that call it as the other roles."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from motor.common.pki import DevPki
from motor.common.security import Role
from motor.controller.config import ControllerConfig
from motor.controller.main import ControllerService


@asynccontextmanager
async def mtls_controller(pki: DevPki, **extra: Any) -> AsyncIterator[tuple[ControllerService, dict[str, Any]]]:
    """The started service and what its start returned (grpc_port, http_port); stopped at the end."""
    service = ControllerService(ControllerConfig.model_validate({
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_sec": 0.5},
        "status_http": {"host": "127.0.0.1", "port": 0},
        "hardware_monitor": {"kubernetes": "off"},
        "security": pki.security(Role.CONTROLLER),
        **extra,
    }))
    info = await service.start()
    try:
        yield service, info
    finally:
        await service.stop()
