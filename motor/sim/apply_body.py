"""The FT ``apply`` body and its params, validated with pydantic at the HTTP boundary.

Two layers, because they fail differently (DESIGN.md §3):

* the body (``instruction``, ``request_id``, ``params`` object) -- malformed is HTTP 400 and never
  reaches the engine (``parse_apply_body``);
* the params' types (``removed_dp_ranks``, ``dp_master_ip``, ``dp_store_port``) -- a bad one is a
  rejection the engine records in status after its 202, like every other refusal of a well-formed
  command (``validate_params``); ``scale_up``'s (``added_dp_ranks`` too, ``removed_dp_ranks`` may be
  empty) are typed by ``validate_scale_up_params`` and refused with HTTP 400.

Every message names the key and the bad value; pydantic's own wording is replaced because callers
(and their logs) quote these messages.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import ErrorDetails

from motor.common.text import shorten

MAX_REQUEST_ID_CHARS = 256
MAX_PORT = 65535


class Instruction(StrEnum):
    SCALE_DOWN = "scale_down"
    RETRY = "retry"
    SCALE_UP = "scale_up"


KNOWN_PARAMS: dict[Instruction, frozenset[str]] = {
    Instruction.SCALE_DOWN: frozenset({"removed_dp_ranks", "dp_master_ip", "dp_store_port"}),
    Instruction.RETRY: frozenset({"dp_master_ip", "dp_store_port"}),
    Instruction.SCALE_UP: frozenset({"added_dp_ranks", "removed_dp_ranks", "dp_master_ip", "dp_store_port"}),
}
_CHOICES = ", ".join(i.value for i in Instruction)


class ApplyBodyError(ValueError):
    """A malformed apply body (HTTP 400); the message names the bad value."""


@dataclass(frozen=True)
class ApplyRequest:
    instruction: Instruction
    request_id: str
    params: dict[str, Any]

    def unknown_params(self) -> list[str]:
        return sorted(set(self.params) - KNOWN_PARAMS[self.instruction])


def _quoted(value: Any) -> str:
    return shorten(repr(value))


def _typed(value: Any) -> str:
    return f"{type(value).__name__} {_quoted(value)}"


# -- body ---------------------------------------------------------------------------------------
def _check_request_id(value: str) -> str:
    if not value.strip():
        raise ValueError(f"request_id must not be blank, got {value!r}")
    if len(value) > MAX_REQUEST_ID_CHARS:
        raise ValueError(f"request_id is {len(value)} characters, more than {MAX_REQUEST_ID_CHARS}")
    if any(ch in value for ch in "\r\n\t\0"):
        raise ValueError(f"request_id contains control characters: {value!r}")
    return value


class _ApplyBody(BaseModel):
    # Strict: "5" is not a request_id and [1] not params; unknown top-level keys are ignored.
    model_config = ConfigDict(strict=True, extra="ignore")

    instruction: Instruction
    request_id: Annotated[StrictStr, AfterValidator(_check_request_id)]
    params: dict[str, Any] = Field(default_factory=dict)


def _body_message(err: ErrorDetails, raw: bytes | str) -> str:
    kind, loc, value = err["type"], err["loc"], err.get("input")
    if kind == "json_invalid":
        snippet = raw[:60] if isinstance(raw, str) else raw[:60].decode("utf-8", "replace")
        return f"body is not valid JSON ({err.get('ctx', {}).get('error', kind)}): {snippet!r}"
    if not loc:
        return f"body must be a JSON object, got {_typed(value)}"
    field = loc[0]
    if kind == "missing":
        return f"missing {field!r}" + (f"; expected one of: {_CHOICES}" if field == "instruction" else "")
    if field == "instruction":
        return f"invalid instruction {_quoted(value)}; expected one of: {_CHOICES}"
    if field == "request_id":
        if kind == "value_error":
            return str(err.get("ctx", {}).get("error", err["msg"]))
        return f"request_id must be a string, got {_typed(value)}"
    return f"params must be a JSON object, got {_typed(value)}"


def parse_apply_body(raw: bytes | str) -> ApplyRequest:
    """Parse ``{"instruction", "request_id", "params"}`` or raise ApplyBodyError (first problem)."""
    try:
        body = _ApplyBody.model_validate_json(raw)
    except ValidationError as exc:
        raise ApplyBodyError(_body_message(exc.errors()[0], raw)) from None
    return ApplyRequest(instruction=body.instruction, request_id=body.request_id, params=body.params)


# -- params -------------------------------------------------------------------------------------
def _not_null(value: Any) -> Any:
    # Runs only for keys that are present: an explicit null is a bad value, not an absent key.
    if value is None:
        raise ValueError("null")
    return value


def _ip_address(value: str | None) -> str | None:
    if value is not None:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError("not an IP address") from None
    return value


def _rank_in_group(value: int, info: ValidationInfo) -> int:
    dp_size = (info.context or {}).get("dp_size")
    if value < 0 or (dp_size is not None and value >= dp_size):
        raise ValueError("out of range")
    return value


_Present = BeforeValidator(_not_null)
_Rank = Annotated[StrictInt, AfterValidator(_rank_in_group)]


class ApplyParams(BaseModel):
    """Typed ``params`` of both instructions; absent keys stay None (rules decide if they are needed)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    removed_dp_ranks: Annotated[list[_Rank] | None, _Present, Field(min_length=1)] = None
    dp_master_ip: Annotated[StrictStr | None, _Present, AfterValidator(_ip_address)] = None
    dp_store_port: Annotated[StrictInt | None, _Present, Field(ge=1, le=MAX_PORT)] = None


class ParamsError(ValueError):
    """A params value of the wrong type or range; the message names the key and the value."""


class ScaleUpParams(BaseModel):
    """Typed ``params`` of ``scale_up``: ``removed_dp_ranks`` (the ranks still removed after the
    round) may be empty; absent keys stay None (the rules name them)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    added_dp_ranks: Annotated[list[_Rank] | None, _Present, Field(min_length=1)] = None
    removed_dp_ranks: Annotated[list[_Rank] | None, _Present] = None
    dp_master_ip: Annotated[StrictStr | None, _Present, AfterValidator(_ip_address)] = None
    dp_store_port: Annotated[StrictInt | None, _Present, Field(ge=1, le=MAX_PORT)] = None


def _params_message(errors: list[ErrorDetails], dp_size: int) -> str:
    first = errors[0]
    field, value = first["loc"][0], first.get("input")
    if field in ("removed_dp_ranks", "added_dp_ranks"):
        items = [e.get("input") for e in errors if e["loc"][0] == field and len(e["loc"]) > 1]
        if items:
            return (f"params.{field} has invalid ranks {_quoted(items)} "
                    f"(original dp ranks are 0..{dp_size - 1})")
        if first["type"] == "too_short":
            return f"params.{field} is empty"
        return f"params.{field} must be a list of ranks, got {_quoted(value)}"
    if field == "dp_master_ip":
        if isinstance(value, str):
            return f"params.dp_master_ip {value!r} is not an IP address"
        return f"params.dp_master_ip must be a string IP address, got {_quoted(value)}"
    return f"params.dp_store_port must be an integer in [1, {MAX_PORT}], got {_quoted(value)}"


def validate_params(params: dict[str, Any], dp_size: int) -> ApplyParams:
    """Types and ranges of ``params`` (ranks are original ranks in ``0..dp_size-1``) or ParamsError."""
    try:
        return ApplyParams.model_validate(params, context={"dp_size": dp_size})
    except ValidationError as exc:
        raise ParamsError(_params_message(exc.errors(), dp_size)) from None


def validate_scale_up_params(params: dict[str, Any], dp_size: int) -> ScaleUpParams:
    """Types and ranges of ``scale_up``'s ``params`` or ParamsError (the message names the value)."""
    try:
        return ScaleUpParams.model_validate(params, context={"dp_size": dp_size})
    except ValidationError as exc:
        raise ParamsError(_params_message(exc.errors(), dp_size)) from None
