"""The security posture every Motor process checks in its config before anything binds.

Three rules, each one config error line (the process exits 2 before it listens):

- **Roles whenever TLS is on.** `server.tls` without `require_client_auth` would serve TLS with no
  caller identity, so no role could be checked: refused.
- **No plaintext off loopback by accident.** Without `security`, every listener (gRPC, health, HTTP)
  must bind a loopback address, unless `insecure_plaintext: true` says the plaintext is meant (a
  trusted network, the base manifests' demo).
- **`mode: production`** (`--mode production`) refuses plaintext altogether (`security` is required,
  `insecure_plaintext` is refused), and every test-only knob: the NodeManager's `fault_injection.*`
  delays and an engine command line that turns on the reference engine's fault injection.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field

from motor.common.config.base import ConfigModel
from motor.common.config.listeners import HttpListenConfig, ServerConfig

ProcessMode = Literal["test", "production"]
# The reference engine's flag that opens its /motor/admin/* routes.
ENGINE_FAULT_INJECTION_FLAG = "--enable-fault-injection"


class PostureConfig(ConfigModel):
    """The two posture keys every Motor service config has (see motor.common.config.posture)."""

    mode: ProcessMode = Field(
        default="test",
        description="production: refuse plaintext (`security` required), fault injection and test delays.")
    insecure_plaintext: bool = Field(
        default=False,
        description="Allow plaintext listeners on non-loopback addresses without `security` (refused in "
                    "production mode); unset: such a bind refuses to start.")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a DNS name may resolve anywhere


def listeners(config: BaseModel) -> Iterator[tuple[str, str]]:
    """(dotted key, host) of every server the config binds."""
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, (ServerConfig, HttpListenConfig)):
            yield f"{name}.host", value.host


def _fault_injection_keys(config: Any) -> list[str]:
    keys = []
    injection = getattr(config, "fault_injection", None)
    if isinstance(injection, BaseModel):
        default = type(injection)()
        keys += [f"fault_injection.{name}={getattr(injection, name)!r}" for name in type(injection).model_fields
                 if getattr(injection, name) != getattr(default, name)]
    for name in ("engine_command", "engine_extra_args"):
        if ENGINE_FAULT_INJECTION_FLAG in (getattr(config, name, None) or []):
            keys.append(f"{name} has {ENGINE_FAULT_INJECTION_FLAG}")
    return keys


def posture_error(config: Any) -> str | None:
    """Why this service config must not start, or None. `config` has `server`, `security`, `mode`
    and `insecure_plaintext` (PostureConfig)."""
    tls = config.server.tls
    if tls is not None and not tls.require_client_auth:
        return ("server.tls.require_client_auth=false: roles are mandatory whenever TLS is on (set "
                "require_client_auth: true with client_ca_file, or use `security`)")
    if config.mode == "production":
        if config.security is None:
            return "mode=production refuses plaintext: set `security` (mTLS and roles on every contract)"
        if config.insecure_plaintext:
            return "mode=production refuses insecure_plaintext=true"
        injected = _fault_injection_keys(config)
        if injected:
            return f"mode=production refuses fault injection and test delays: {', '.join(injected)}"
        return None
    if config.security is None and not config.insecure_plaintext:
        for key, host in listeners(config):
            if not is_loopback(host):
                return (f"{key}={host!r} is not a loopback address and there is no `security`: set `security` "
                        "(mTLS), bind 127.0.0.1, or set insecure_plaintext: true to serve plaintext on purpose")
    return None


def check_posture(config: Any) -> Any:
    """A service's model validator (mode="after")."""
    message = posture_error(config)
    if message is not None:
        raise ValueError(message)
    return config
