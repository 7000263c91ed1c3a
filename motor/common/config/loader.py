"""A config file (YAML or JSON) plus `--set dotted.key=value` overrides → a validated, frozen model.

Every refusal is one `ConfigError` line naming each offending key (dotted) and its value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration value was refused; the message is one line naming key and value."""


def _format_errors(exc: ValidationError, section: str | None) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        if section:
            loc = f"{section}.{loc}" if loc else section
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        value = err.get("input")
        shown = "" if err["type"] in ("missing",) or isinstance(value, dict) else f"={value!r}"
        # A model validator's message names its own keys.
        parts.append(f"{loc}{shown}: {msg}" if loc else msg)
    return "invalid configuration: " + "; ".join(parts)


def set_dotted(data: dict[str, Any], dotted_key: str, value: Any) -> None:
    """Sets data['a']['b'] for 'a.b', creating dicts on the way."""
    keys = dotted_key.split(".")
    if not all(keys):
        raise ConfigError(f"invalid configuration: override key {dotted_key!r} is malformed")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"invalid configuration: {dotted_key}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """'a.b=VALUE' → ('a.b', VALUE parsed as a YAML scalar/flow value)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"invalid configuration: override {item!r} is not KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(text) if text else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid configuration: override {item!r}: {exc}".replace("\n", " ")) from None


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"invalid configuration: cannot read --config {str(path)!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid configuration: {str(path)!r} is not YAML/JSON: {exc}".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration: {str(path)!r} must hold a mapping, got {type(data).__name__}")
    return data


def build_config(model: type[M], data: dict[str, Any], section: str | None = None) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, section)) from None


def load_config(
    model: type[M],
    path: Path | None = None,
    overrides: list[tuple[str, Any]] | None = None,
) -> M:
    """File (optional) + dotted overrides → a validated, frozen config, or ConfigError."""
    data = read_config_file(path) if path is not None else {}
    for key, value in overrides or []:
        set_dotted(data, key, value)
    return build_config(model, data)
