"""engine-check's report: one verdict line per check, and the HTTP answers it judges."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

OK, FAIL, INFO = "ok", "FAIL", "info"


@dataclass
class Report:
    lines: list[tuple[str, str]] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append((OK, text))

    def fail(self, text: str) -> None:
        self.lines.append((FAIL, text))

    def info(self, text: str) -> None:
        self.lines.append((INFO, text))

    @property
    def failures(self) -> list[str]:
        return [text for verdict, text in self.lines if verdict == FAIL]

    @property
    def conforms(self) -> bool:
        return not self.failures

    def render(self) -> str:
        return "\n".join(f"{verdict:<4}  {text}" for verdict, text in self.lines)


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes
    elapsed_sec: float


# (method, url, body or None, timeout) -> the answer; raises Unreachable or TimeoutError.
Transport = Callable[[str, str, bytes | None, float], HttpAnswer]
