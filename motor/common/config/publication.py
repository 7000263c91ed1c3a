"""Where the Controller publishes the serving view: its own Coordinator, routers the user already
runs (vllm-router's worker API), or both. Every publisher gets the same projection; an instance is
published (`serving_published`, so `can_serve`) only when every required publisher acknowledged it."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from motor.common.config.base import ConfigModel, PositiveSec

PublisherKind = Literal["coordinator", "vllm_router"]


def check_router_url(value: str) -> str:
    """http(s)://host:port with no path, query or credentials: the router's own base URL."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"url {value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url {value!r} must be http://host:port or https://host:port")
    if port is None:
        raise ValueError(f"url {value!r} names no port (vllm-router listens on --port, 30000 by default)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"url {value!r} must be the router's base URL only (no path, query or credentials)")
    return value.rstrip("/")


class VllmRouterConfig(ConfigModel):
    """One vllm-router process (one replica: each keeps its own worker list, so every replica of a
    router Deployment is listed here, e.g. by a StatefulSet's stable names)."""

    url: str = Field(description="The router's base URL, http(s)://host:port (its --host/--port).")
    request_timeout_sec: PositiveSec = Field(
        default=2.0, description="Deadline of one call to the router's worker API, in seconds.")
    attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3, description="Tries of one worker-API call before the publication counts as failed.")
    backoff_initial_sec: PositiveSec = Field(
        default=0.1, description="Wait after the first failed try, doubling per try up to backoff_max_sec.")
    backoff_max_sec: PositiveSec = Field(default=1.0, description="Cap of the wait between tries, in seconds.")
    reconcile_interval_sec: PositiveSec = Field(
        default=5.0,
        description="Seconds between reads of the router's worker list, repairing drift (a worker added by hand, "
                    "a restarted router) towards what was last published there.")
    required: bool = Field(
        default=True,
        description="Counts towards serving_published/can_serve: an instance is published only once this router "
                    "acknowledged it; false: best effort, failures only reported.")
    api_key_file: str | None = Field(
        default=None, description="File holding the router's --api-key, sent as a Bearer token; unset: none.")

    _check_url = field_validator("url")(check_router_url)

    @model_validator(mode="after")
    def _check_backoff(self) -> VllmRouterConfig:
        if self.backoff_initial_sec > self.backoff_max_sec:
            raise ValueError(f"backoff_initial_sec={self.backoff_initial_sec:g} exceeds "
                             f"backoff_max_sec={self.backoff_max_sec:g}")
        return self


class PublicationConfig(ConfigModel):
    """Which publishers receive the serving view (ADD after a round, DEL before apply, periodic SET)."""

    publishers: list[PublisherKind] = Field(
        default=["coordinator"],
        description="Publishers, each once: coordinator (Motor's Coordinator at coordinator_address; skipped when "
                    "that is unset) and/or vllm_router (every router in vllm_routers).")
    vllm_routers: list[VllmRouterConfig] = Field(
        default=[], description="The vllm-router processes published to when publishers holds vllm_router.")

    @model_validator(mode="after")
    def _check_publishers(self) -> PublicationConfig:
        seen: set[str] = set()
        for kind in self.publishers:
            if kind in seen:
                raise ValueError(f"publication.publishers lists {kind!r} twice")
            seen.add(kind)
        if "vllm_router" in seen and not self.vllm_routers:
            raise ValueError("publication.publishers holds 'vllm_router' but publication.vllm_routers is empty")
        if self.vllm_routers and "vllm_router" not in seen:
            urls = [r.url for r in self.vllm_routers]
            raise ValueError(f"publication.vllm_routers lists {urls} but publication.publishers "
                             f"{list(self.publishers)} does not hold 'vllm_router'")
        urls: set[str] = set()
        for router in self.vllm_routers:
            if router.url in urls:
                raise ValueError(f"publication.vllm_routers lists {router.url!r} twice")
            urls.add(router.url)
        return self
