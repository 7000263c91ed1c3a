"""The `RuntimeStore` interface and the argument checks both backends share.

Every write is a compare-and-set on `generation`: a writer states the generation it last saw, and the
write succeeds only if the stored record still has it. A stale writer gets `StaleWriteError` and
cannot overwrite newer state.

The store checks exactly "stored generation == expected" at the moment of the write, nothing more.
It does not require the new record's generation to be larger (only never smaller): callers that
want every other writer excluded bump the generation on each write (FtRuntimeStore does).

Reading fails closed: a record that cannot be decoded raises `StoreError` naming its key, from
`load_all` too. A controller must not start on state it cannot read: skipping a record would make
the instance look brand new and let the controller re-drive a scale-down that the RFC's restart rule
forbids ("重启后不重放 apply"); an operator has to repair or delete the key.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import TypeAdapter, ValidationError

from motor.common.text import shorten
from motor.controller.persistence.records import PersistedInstance, StrictNonNegativeInt, check_record

_GENERATION: TypeAdapter[int] = TypeAdapter(StrictNonNegativeInt)


class RuntimeStore(Protocol):
    """Backend interface; implementations: MemoryRuntimeStore (default) and EtcdRuntimeStore."""

    description: str

    async def load_all(self) -> list[PersistedInstance]: ...

    async def load(self, instance_id: int) -> PersistedInstance | None: ...

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        """Writes `record` if the stored generation equals `expected_generation` (None: no record yet)."""

    async def delete(self, instance_id: int, expected_generation: int) -> None: ...

    async def close(self) -> None: ...


def check_expected(instance_id: int, expected_generation: int | None, *, allow_none: bool) -> None:
    """ValueError (a caller bug) unless `expected_generation` is a generation (or None if allowed)."""
    if expected_generation is None and allow_none:
        return
    try:
        _GENERATION.validate_python(expected_generation)
    except ValidationError:
        raise ValueError(f"instance {instance_id}: expected_generation {shorten(repr(expected_generation))} "
                         f"must be an int >= 0{' or None' if allow_none else ''}") from None


def check_put(record: PersistedInstance, expected_generation: int | None) -> PersistedInstance:
    """The normalized record of a put, after every caller-side check (ValueError), before any I/O."""
    record = check_record(record)
    check_expected(record.instance_id, expected_generation, allow_none=True)
    if expected_generation is not None and record.generation < expected_generation:
        raise ValueError(f"instance {record.instance_id}: generation {record.generation} would go back "
                         f"from expected generation {expected_generation}")
    return record
