"""Where a service's gRPC and HTTP servers listen."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from motor.common.config.addresses import check_host
from motor.common.config.base import ConfigModel, PositiveSec, Port
from motor.common.config.tls import TlsConfig

# The gRPC default; every Motor request fits far below it (bounded lists and strings).
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024


class ServerConfig(ConfigModel):
    """Where a gRPC server listens."""

    host: str = Field(default="127.0.0.1", description="Bind address of the gRPC server.")
    port: Port = Field(default=0, description="gRPC port; 0 picks a free one (written to the ready file).")
    tls: TlsConfig | None = Field(default=None, description="Server TLS; unset: plaintext (or mTLS from `security`).")
    shutdown_grace_sec: PositiveSec = Field(
        default=5.0, description="Seconds in-flight RPCs get to finish at shutdown before they are cancelled.")
    # Larger requests are refused with RESOURCE_EXHAUSTED before any handler runs.
    max_receive_message_bytes: Annotated[int, Field(ge=64 * 1024, le=256 * 1024 * 1024)] = Field(
        default=DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        description="Largest request accepted, in bytes; larger ones get RESOURCE_EXHAUSTED before any handler.")
    # Kubernetes gRPC probes speak no TLS, so when the main port requires client certificates they
    # need a listener of their own; it tells SERVING / NOT_SERVING and nothing else.
    health_port: Port | None = Field(
        default=None,
        description="Plaintext listener on `host` serving only grpc.health.v1.Health (Kubernetes probes); "
                    "unset: none.")

    _host = field_validator("host")(check_host)


class HttpListenConfig(ConfigModel):
    """Where an HTTP server listens."""

    host: str = Field(default="127.0.0.1", description="Bind address of the HTTP server.")
    port: Port = Field(default=0, description="HTTP port; 0 picks a free one (written to the ready file).")

    _host = field_validator("host")(check_host)
