"""Where one engine's FT API listens (the endpoint id is the original global DP rank it answers for)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineAddress:
    endpoint_id: int
    host: str
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
