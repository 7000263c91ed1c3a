"""The engine FT API's documents (DESIGN §3): what an engine answers and what it is sent.

Status answers are checked against Motor's identity contract (RFC §4.1): the document must hold
exactly one entry and its ``id`` must equal the endpoint id asked for. A missing, duplicate, unknown
or mismatched id is an ``EngineIdentityError``; anything else that is not the documented shape
(non-JSON, wrong types, an unknown ``status`` string, a non-200 answer) is ``EngineStatusMalformed``.
Both are ``EngineProtocolError`` and are never "fixed up"; transport failures (raised by
``engine_http``) are ``EngineUnreachable`` and ``EngineTimeout``. The answers' shapes are pydantic
models; their errors are re-worded here to name the key, the bad value and the endpoint.
``diagnosing`` (vLLM's transient state while it queries its all2all mask) is a known status.
Extra keys of an entry (``dp_rank``, ...) are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from gen.motor.v1 import common_pb2
from motor.common.text import shorten

HEALTH_VALUES = {
    "healthy": common_pb2.ENGINE_HEALTH_HEALTHY,
    "diagnosing": common_pb2.ENGINE_HEALTH_DIAGNOSING,
    "unhealthy": common_pb2.ENGINE_HEALTH_UNHEALTHY,
    "dead": common_pb2.ENGINE_HEALTH_DEAD,
}
FT_STATE_VALUES = {"recovering": common_pb2.FT_STATE_RECOVERING, "failed": common_pb2.FT_STATE_FAILED}


class EngineCallError(Exception):
    """A call to an engine failed; ``endpoint_id`` names the engine."""

    prefix = "engine call failed"

    def __init__(self, endpoint_id: int, detail: str) -> None:
        self.endpoint_id = endpoint_id
        self.detail = detail
        super().__init__(f"{self.prefix}: endpoint {endpoint_id}: {detail}")


class EngineUnreachable(EngineCallError):
    prefix = "engine unreachable"


class EngineTimeout(EngineCallError):
    prefix = "engine timed out"


class EngineProtocolError(EngineCallError):
    """The engine answered, but not with what the contract says."""


class EngineIdentityError(EngineProtocolError):
    prefix = "engine identity contract violated"


class EngineStatusMalformed(EngineProtocolError):
    prefix = "engine status malformed"


@dataclass(frozen=True)
class EngineStatusEntry:
    """One identity-checked status entry."""

    id: int
    status: str  # healthy | diagnosing | unhealthy | dead
    ft_state: str | None = None  # None when the key was absent
    fault_info: str | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None
    mask: tuple[int, ...] = ()
    observed_at_unix_sec: float = 0.0

    def to_pb(self) -> common_pb2.EngineFtStatus:
        msg = common_pb2.EngineFtStatus(
            id=self.id,
            status=HEALTH_VALUES[self.status],
            fault_info=self.fault_info or "",
            last_ft_request_id=self.last_ft_request_id or "",
            ft_error=self.ft_error or "",
            mask=list(self.mask),
            observed_at_unix_sec=self.observed_at_unix_sec,
        )
        if self.ft_state is None:
            msg.ft_state = common_pb2.FT_STATE_UNSPECIFIED
        elif self.ft_state in FT_STATE_VALUES:
            msg.ft_state = FT_STATE_VALUES[self.ft_state]
        else:
            msg.ft_state = common_pb2.FT_STATE_UNKNOWN
            msg.raw_ft_state = self.ft_state
        return msg

    def describe(self) -> str:
        parts = [f"status={self.status}"]
        for key in ("ft_state", "fault_info", "last_ft_request_id", "ft_error"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={value!r}")
        return " ".join(parts)


# -- status answer -------------------------------------------------------------------------------
class _Strict(BaseModel):
    # Strict: JSON gives exact types, so "1" or true is not an id; unknown keys (dp_rank, ...) are
    # ignored, as DESIGN §3 asks.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _EntryIdentity(_Strict):
    id: int


class _StatusDocument(_Strict):
    """Only what the identity contract needs; every entry's id is checked before any other key."""

    engines: list[_EntryIdentity]


def _known_health(value: str) -> str:
    if value not in HEALTH_VALUES:
        raise ValueError(f"not one of {sorted(HEALTH_VALUES)}")
    return value


class _StatusEntry(_Strict):
    # Field order is the order keys are checked in, so the first error named is stable.
    status: Annotated[str, AfterValidator(_known_health)]
    # Ranks are int32 on the wire (EngineFtStatus.mask): a larger value is a malformed answer.
    mask: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] | None = None
    ft_state: str | None = None
    fault_info: str | None = None
    last_ft_request_id: str | None = None
    ft_error: str | None = None


_ENTRY_EXPECTED = {"mask": "a list of integers (ranks 0..2^31-1)"}  # every other optional key: a string


def _document_error(endpoint_id: int, doc: Any, text: str, exc: ValidationError) -> EngineProtocolError:
    loc = exc.errors()[0]["loc"]
    if not loc:
        return EngineStatusMalformed(endpoint_id, f"status body is not a JSON object: received {shorten(text)!r}")
    engines = doc.get("engines")
    if len(loc) == 1:
        return EngineStatusMalformed(endpoint_id, f"'engines' is not a list: received {shorten(engines)}")
    i = loc[1]
    if len(loc) == 2:
        return EngineStatusMalformed(endpoint_id, f"engines[{i}] is not an object: received {shorten(engines[i])}")
    return EngineIdentityError(endpoint_id,
                               f"engines[{i}].id is missing or not an integer: received {shorten(engines[i])}")


def _entry_error(endpoint_id: int, entry: dict[str, Any], exc: ValidationError) -> EngineStatusMalformed:
    key = str(exc.errors()[0]["loc"][0])
    value = shorten(entry.get(key))
    if key == "status":
        return EngineStatusMalformed(endpoint_id, f"engines[0].status is {value}, not one of {sorted(HEALTH_VALUES)}")
    return EngineStatusMalformed(endpoint_id, f"engines[0].{key} must be {_ENTRY_EXPECTED.get(key, 'a string')}, "
                                              f"received {value}")


def _check_identity(endpoint_id: int, ids: list[int]) -> None:
    if not ids:
        raise EngineIdentityError(endpoint_id, f"no engines entry; expected exactly one with id {endpoint_id}")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise EngineIdentityError(endpoint_id, f"duplicate engine ids {duplicates} in {ids}")
    unknown = sorted(i for i in ids if i != endpoint_id)
    if len(ids) == 1 and unknown:
        raise EngineIdentityError(endpoint_id, f"the single entry has id {ids[0]}, expected {endpoint_id}")
    if unknown:
        what = "and no entry for it" if endpoint_id not in ids else "beside it"
        raise EngineIdentityError(endpoint_id, f"unknown engine ids {unknown} {what} (received ids {ids})")


def parse_status(endpoint_id: int, http_status: int, body: bytes,
                 observed_at_unix_sec: float = 0.0) -> EngineStatusEntry:
    """The status answer of the engine serving ``endpoint_id`` → its checked entry, or a protocol error."""
    text = body.decode("utf-8", "replace")
    if http_status != 200:
        raise EngineStatusMalformed(endpoint_id, f"status route answered HTTP {http_status}: {shorten(text)!r}")
    try:
        doc = json.loads(text)
    except ValueError:
        raise EngineStatusMalformed(endpoint_id, f"status body is not JSON: received {shorten(text)!r}") from None
    except RecursionError:
        # Nested deeper than the parser's stack: a bad answer like any other, not a crash of the poll.
        raise EngineStatusMalformed(endpoint_id, f"status body is nested too deeply: received "
                                                 f"{shorten(text)!r}") from None
    try:
        document = _StatusDocument.model_validate(doc)
    except ValidationError as exc:
        raise _document_error(endpoint_id, doc, text, exc) from None
    _check_identity(endpoint_id, [e.id for e in document.engines])
    raw = doc["engines"][0]
    try:
        entry = _StatusEntry.model_validate(raw)
    except ValidationError as exc:
        raise _entry_error(endpoint_id, raw, exc) from None
    return EngineStatusEntry(
        id=endpoint_id,
        status=entry.status,
        ft_state=entry.ft_state,
        fault_info=entry.fault_info,
        last_ft_request_id=entry.last_ft_request_id,
        ft_error=entry.ft_error,
        mask=tuple(entry.mask or ()),
        observed_at_unix_sec=observed_at_unix_sec,
    )


# -- apply -----------------------------------------------------------------------------------------
SCALE_DOWN = "scale_down"


def build_scale_down_body(request_id: str, removed_dp_ranks: list[int], dp_master_ip: str, dp_store_port: int) -> str:
    """The exact JSON sent to every target engine (sorted cumulative ranks)."""
    return json.dumps(
        {
            "instruction": SCALE_DOWN,
            "request_id": request_id,
            "params": {
                "removed_dp_ranks": sorted(removed_dp_ranks),
                "dp_master_ip": dp_master_ip,
                "dp_store_port": dp_store_port,
            },
        }
    )


RETRY = "retry"


def build_retry_body(request_id: str) -> str:
    """The exact JSON of a retry: the same DP group rebuilt in place, so no params (vLLM 0.33.0's
    router and the reference engine take none; the engines keep their current master)."""
    return json.dumps({"instruction": RETRY, "request_id": request_id, "params": {}})


def _none_when_invalid(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


# A 202 means accepted whatever its body says: a key of the wrong type is dropped, never an error.
_Informative = Annotated[str | None, WrapValidator(_none_when_invalid)]


class _Accepted(_Strict):
    request_id: _Informative = None
    message: _Informative = None


class _DetailText(RootModel[str]):
    def text(self) -> str:
        return self.root


class _DetailOther(RootModel[Any]):
    def text(self) -> str:
        return json.dumps(self.root)


class _DetailItem(_Strict):
    """One validation error object of a ``detail`` list (vLLM 0.33.0's media-type check lists a string)."""

    msg: Any
    loc: list[Any] = Field(default_factory=list)

    def text(self) -> str:
        loc = ".".join(str(p) for p in self.loc if p is not None)
        return f"{loc}: {self.msg}" if loc else str(self.msg)


class _DetailList(RootModel[list[Annotated[_DetailItem | _DetailText | _DetailOther,
                                          Field(union_mode="left_to_right")]]]):
    def text(self) -> str:
        return "; ".join(item.text() for item in self.root)


class _ErrorBody(_Strict):
    """A refusal as FastAPI's default handlers write it: ``detail`` is a string (an HTTPException) or a
    list of errors (a RequestValidationError, e.g. vLLM's missing JSON content type; HTTP 422)."""

    detail: Annotated[_DetailText | _DetailList | _DetailOther, Field(union_mode="left_to_right")]

    def text(self) -> str:
        return self.detail.text()


class _VllmErrorInfo(_Strict):
    message: str


class _VllmErrorBody(_Strict):
    """A refusal as ``vllm serve`` writes it: its exception handlers turn every HTTPException and
    validation error into ``{"error": {"message", "type", "param", "code"}}`` (vLLM's ErrorResponse)."""

    error: _VllmErrorInfo

    def text(self) -> str:
        return self.error.message


class _MessageBody(_Strict):
    """A refusal as SGLang's FT manager writes it: ``{"message": "..."}``."""

    message: str

    def text(self) -> str:
        return self.message


def parse_apply_answer(http_status: int, body: bytes) -> tuple[bool, str, str]:
    """(accepted, engine_request_id, message) of an apply answer; accepted only on HTTP 202."""
    text = body.decode("utf-8", "replace")
    if http_status == 202:
        try:
            accepted = _Accepted.model_validate_json(text)
        except ValidationError:  # not JSON, or not an object
            return True, "", shorten(text)
        message = accepted.message if accepted.message is not None else shorten(text)
        return True, accepted.request_id or "", message
    for shape in (_ErrorBody, _VllmErrorBody, _MessageBody):
        try:
            error = shape.model_validate_json(text)
        except ValidationError:  # not JSON, not an object, or not this shape
            continue
        return False, "", f"HTTP {http_status}: {shorten(error.text(), 400)}"
    return False, "", f"HTTP {http_status}: {shorten(text, 400)!r}"
