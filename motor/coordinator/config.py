"""motor-coordinator's configuration: its servers, the Controller it syncs from, upstream timeouts,
retries, holding and re-inference."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator

from motor.common.config.addresses import check_host_ports
from motor.common.config.base import ConfigModel, PositiveSec
from motor.common.config.listeners import HttpListenConfig, ServerConfig
from motor.common.config.posture import PostureConfig, check_posture
from motor.common.config.tls import SecurityConfig, security_exclusive


class MigrationConfig(ConfigModel):
    """Re-inference (the RFC's TokenReinference slot): a request whose engine faulted while serving it
    (a 5xx answer, an error event or a broken stream, the endpoint withdrawn from the serving view)
    is sent again to a serving endpoint of the same model; a stream continues from what the client
    already received (prompt + generated text or token ids as the new prompt, the remaining
    max_tokens; chat: the partial assistant message continued), so the client sees one stream."""

    enabled: bool = Field(default=True, description="Re-send a request whose engine faulted mid-flight elsewhere.")
    max_migrations_per_request: Annotated[int, Field(ge=1, le=16)] = Field(
        default=3, description="Times one request may continue elsewhere; then it fails.")
    # A longer stream is still served; it just cannot be migrated.
    max_carried_length: Annotated[int, Field(ge=1, le=64 * 1024 * 1024)] = Field(
        default=1024 * 1024,
        description="Longest sequence carried as the new prompt: token ids when ids are carried, else characters.")
    # vLLM's return_token_ids, removed again from what the client sees unless it asked.
    carry_token_ids: bool = Field(
        default=True,
        description="Completions streams ask the engine for token ids, so a continuation carries ids, not "
                    "re-tokenized text.")
    # The streams of a drained endpoint that still deliver finish where they are.
    withdrawn_stall_sec: Annotated[float, Field(gt=0, le=600)] = Field(
        default=2.0,
        description="Seconds without output after which a stream of a withdrawn endpoint moves (a wedged engine).")


class CoordinatorConfig(PostureConfig):
    """The Coordinator's settings. Across keys: upstream_connect_timeout_sec must not exceed
    upstream_timeout_sec, and `security` excludes server.tls."""

    server: ServerConfig = Field(
        default=ServerConfig(), description="The gRPC management server (Controller, motorctl).")
    http: HttpListenConfig = Field(default=HttpListenConfig(), description="The OpenAI-compatible inference front.")
    # Without TLS it is the only guard of Refresh; with `security` the caller's role is checked too.
    management_key: str | None = Field(
        default=None, description="Shared key required on management calls (gRPC metadata x-motor-key); unset: open.")
    security: SecurityConfig | None = Field(
        default=None, description="mTLS everywhere with role checks; excludes server.tls.")
    controller_addresses: list[str] = Field(
        default=[],
        description="Controller replicas (host:port) asked for the whole serving view at start; empty: wait "
                    "for the periodic SET.")
    # It goes on asking in the background; requests meanwhile wait (hold_when_unavailable_sec).
    controller_sync_timeout_sec: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=10.0, description="Seconds start-up waits for that first view before reporting ready anyway.")
    upstream_timeout_sec: PositiveSec = Field(
        default=600.0, description="Bound of one proxied request to an engine, first byte included, in seconds.")
    upstream_connect_timeout_sec: PositiveSec = Field(
        default=2.0, description="Bound of connecting to an engine, in seconds.")
    max_retries: Annotated[int, Field(ge=0, le=16)] = Field(
        default=2, description="Other endpoints tried when one fails before its first byte.")
    retry_after_sec: Annotated[int, Field(ge=1, le=3600)] = Field(
        default=1, description="Retry-After of a 503 answer, in whole seconds.")
    endpoint_cooldown_sec: Annotated[float, Field(ge=0, le=3600)] = Field(
        default=2.0,
        description="Seconds an endpoint that failed before its first byte gets no new request; 0: never skipped.")
    hold_when_unavailable_sec: Annotated[float, Field(ge=0, le=3600)] = Field(
        default=30.0,
        description="Seconds a request nothing can take (a drain, every endpoint failing) waits before its "
                    "503; 0: at once.")
    # The highest Controller leader term seen is kept here so a restarted Coordinator refuses a
    # deposed leader's first Refresh (motor.common.term_fence); the Coordinator has no etcd access.
    state_dir: str | None = Field(
        default=None, description="Directory of the Coordinator's own state (the highest leader term seen); "
                    "unset: kept in memory only.")
    # A request beyond it is answered at once, before its body is read.
    max_concurrent_requests: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=1024, description="Inference requests served at once; one more gets 429 with Retry-After.")
    max_engine_answer_bytes: Annotated[int, Field(ge=1024, le=1024 * 1024 * 1024)] = Field(
        default=64 * 1024 * 1024,
        description="Bound of a non-streamed engine answer, in bytes; a larger one is answered 502.")
    api_key_file: str | None = Field(
        default=None, description="File of inference API keys, one per line (`Authorization: Bearer <key>`); "
                    "unset: inference is open.")
    management_key_file: str | None = Field(
        default=None, description="File holding the management key (instead of management_key).")
    # A migrated request is held again, from its fault, while nothing can serve.
    migration: MigrationConfig = Field(
        default=MigrationConfig(), description="Re-inference of requests whose engine faulted mid-flight.")

    @field_validator("management_key")
    @classmethod
    def _check_management_key(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("management_key is blank; omit it to leave management open")
        return value

    @field_validator("state_dir", "api_key_file", "management_key_file")
    @classmethod
    def _check_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise ValueError(f"{info.field_name} {value!r} is blank or holds a NUL byte; omit it instead")
        return value

    @model_validator(mode="after")
    def _check_key_sources(self) -> CoordinatorConfig:
        if self.management_key is not None and self.management_key_file is not None:
            raise ValueError("management_key and management_key_file exclude each other; set one")
        return self

    _check_controllers = field_validator("controller_addresses")(check_host_ports)
    _check_security = model_validator(mode="after")(security_exclusive)
    _check_posture = model_validator(mode="after")(check_posture)

    @model_validator(mode="after")
    def _check_upstream_timeouts(self) -> CoordinatorConfig:
        if self.upstream_connect_timeout_sec > self.upstream_timeout_sec:
            raise ValueError(
                f"upstream_connect_timeout_sec={self.upstream_connect_timeout_sec:g} exceeds "
                f"upstream_timeout_sec={self.upstream_timeout_sec:g}"
            )
        return self
