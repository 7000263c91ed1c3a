"""The in-memory runtime store: the embedded default when no etcd endpoint is configured."""

from __future__ import annotations

from motor.controller.persistence.base import check_expected, check_put
from motor.controller.persistence.errors import StoreError, stale_write
from motor.controller.persistence.records import PersistedInstance, decode_record, encode_record


class MemoryRuntimeStore:
    """Process-local store with the same CAS semantics and record encoding as etcd; state is lost on
    restart.

    Records are kept encoded, so a record the etcd backend would refuse is refused here too, and
    readers get fresh objects. Each method runs without awaiting, so on one event loop every
    operation is atomic with respect to the others.
    """

    description = "in-memory (state is lost on restart)"

    def __init__(self) -> None:
        self._records: dict[int, tuple[int, bytes]] = {}
        self._closed = False

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise StoreError(f"in-memory store closed ({what})")

    async def load_all(self) -> list[PersistedInstance]:
        self._check_open("load_all")
        return [decode_record(data, key=f"memory:instances/{iid}")
                for iid, (_, data) in sorted(self._records.items())]

    async def load(self, instance_id: int) -> PersistedInstance | None:
        """The stored record of one instance, or None."""
        self._check_open(f"load instance {instance_id}")
        entry = self._records.get(instance_id)
        return None if entry is None else decode_record(entry[1], key=f"memory:instances/{instance_id}")

    async def put(self, record: PersistedInstance, expected_generation: int | None) -> None:
        record = check_put(record, expected_generation)
        iid = record.instance_id
        self._check_open(f"put instance {iid}")
        entry = self._records.get(iid)
        actual = None if entry is None else entry[0]
        if actual != expected_generation:
            raise stale_write(iid, "put", expected_generation, actual)
        self._records[iid] = (record.generation, encode_record(record))

    async def delete(self, instance_id: int, expected_generation: int) -> None:
        check_expected(instance_id, expected_generation, allow_none=False)
        self._check_open(f"delete instance {instance_id}")
        entry = self._records.get(instance_id)
        actual = None if entry is None else entry[0]
        if actual != expected_generation:
            raise stale_write(instance_id, "delete", expected_generation, actual)
        del self._records[instance_id]

    async def close(self) -> None:
        self._closed = True
