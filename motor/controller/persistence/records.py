"""The persisted record of one instance and its stored encoding.

Both backends store exactly `encode_record`'s bytes and read them back with `decode_record`, so they
behave identically, on bad records too. The encoding is canonical JSON (sorted keys, no spaces,
ASCII) with the topology as standard base64; records already stored in that form must keep decoding,
so any change to it needs a new `RECORD_SCHEMA_VERSION`.

One pydantic field set checks both directions: a record being written that breaks it is a caller bug
(ValueError), a stored document that breaks it is corrupt data (StoreError naming the key).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError

from motor.common.text import shorten
from motor.controller.persistence.errors import StoreError

RECORD_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PersistedInstance:
    instance_id: int
    phase: str
    generation: int
    original_dp_ranks: tuple[int, ...]
    dead_committed: tuple[int, ...]
    fallback_strategy: str
    # Serialized motor.v1.Instance (authoritative topology); opaque to the store.
    topology: bytes


# Strict scalars: bool is an int subclass and True as a generation is always a bug; "3" or 3.0 are
# not ints either. The rank containers stay lax so a caller may hand in a list (JSON gives lists);
# strings, bytes and mappings are still refused as rank sequences.
StrictNonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
_Text = Annotated[str, Strict()]
_Ranks = tuple[Annotated[int, Strict()], ...]


def _current_version(version: int) -> int:
    if version != RECORD_SCHEMA_VERSION:
        raise ValueError(f"must be {RECORD_SCHEMA_VERSION}")
    return version


def _base64_text(text: str) -> str:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64 ({exc})") from None
    return text


def _bytes_of_bytearray(value: object) -> object:
    # A bytearray is accepted as topology (stored as the same bytes); a str never is.
    return bytes(value) if isinstance(value, bytearray) else value


class _RecordFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: StrictNonNegativeInt
    phase: _Text
    generation: StrictNonNegativeInt
    original_dp_ranks: _Ranks
    dead_committed: _Ranks
    fallback_strategy: _Text


class _WrittenRecord(_RecordFields):
    """A `PersistedInstance` as handed in by a caller."""

    topology: Annotated[bytes, Strict(), BeforeValidator(_bytes_of_bytearray)]


class _StoredRecord(_RecordFields):
    """The JSON document stored for a record."""

    schema_version: Annotated[int, Strict(), AfterValidator(_current_version)]
    topology_b64: Annotated[str, Strict(), AfterValidator(_base64_text)]


def _reasons(exc: ValidationError) -> str:
    """Every problem pydantic found, each naming the field and quoting the bad value."""
    missing: list[str] = []
    unknown: list[str] = []
    bad: list[str] = []
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0]) if err["loc"] else "<record>"
        if err["type"] == "missing":
            missing.append(field)
        elif err["type"] == "extra_forbidden":
            unknown.append(field)
        else:
            where = field + "".join(f"[{part}]" for part in err["loc"][1:])
            bad.append(f"{where} {shorten(repr(err['input']))}: {err['msg'].removeprefix('Value error, ')}")
    parts = ([f"missing fields {sorted(missing)}"] if missing else []) + (
        [f"unknown fields {sorted(unknown)}"] if unknown else [])
    return "; ".join(parts + bad)


def check_record(record: PersistedInstance) -> PersistedInstance:
    """The record with rank lists as tuples; ValueError (a caller bug, not a backend failure) otherwise."""
    try:
        checked = _WrittenRecord.model_validate(record, from_attributes=True)
    except ValidationError as exc:
        iid = shorten(repr(getattr(record, "instance_id", None)))
        raise ValueError(f"instance {iid}: invalid runtime record: {_reasons(exc)}") from None
    return PersistedInstance(**checked.model_dump())


def encode_record(record: PersistedInstance) -> bytes:
    """Canonical JSON of a record (topology as base64)."""
    record = check_record(record)
    fields = {name: getattr(record, name) for name in _RecordFields.model_fields}
    # Built through the stored model, so nothing is written that decode_record would refuse.
    doc = _StoredRecord(schema_version=RECORD_SCHEMA_VERSION,
                        topology_b64=base64.b64encode(record.topology).decode("ascii"), **fields)
    return json.dumps(doc.model_dump(), sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_record(data: bytes, *, key: str) -> PersistedInstance:
    """The record stored under `key`; StoreError naming the key when it is not a valid record."""
    def corrupt(reason: str) -> StoreError:
        return StoreError(f"corrupt runtime record under key {key!r}: {reason}")

    try:
        doc: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise corrupt(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise corrupt(f"expected a JSON object, got {type(doc).__name__}")
    try:
        stored = _StoredRecord.model_validate(doc)
    except ValidationError as exc:
        if any(err["loc"][:1] == ("schema_version",) for err in exc.errors()):
            # Another version's record may have other fields entirely: its version is what to say.
            raise corrupt(f"schema_version {shorten(repr(doc.get('schema_version')))} "
                          f"is not {RECORD_SCHEMA_VERSION}") from None
        raise corrupt(_reasons(exc)) from None
    fields = stored.model_dump(exclude={"schema_version", "topology_b64"})
    return PersistedInstance(topology=base64.b64decode(stored.topology_b64, validate=True), **fields)
