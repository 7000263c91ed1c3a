"""Re-inference counts per instance: requests migrated away from an instance (counted when its engine
faulted under them) and how many of those finally failed, as ListInstances reports them. Pure.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class InstanceMigrations:
    migrated_requests: int = 0
    failed_requests: int = 0


class MigrationLedger:
    """Requests migrated away from each instance (counted when its engine faulted under them) and how
    many of those finally failed. At most ``max_instances`` instances, the least recently touched
    dropped first."""

    def __init__(self, max_instances: int = 4096) -> None:
        self._max = max_instances
        self._by_instance: OrderedDict[int, InstanceMigrations] = OrderedDict()

    def _entry(self, instance_id: int) -> InstanceMigrations:
        entry = self._by_instance.pop(instance_id, None) or InstanceMigrations()
        self._by_instance[instance_id] = entry
        while len(self._by_instance) > self._max:
            self._by_instance.popitem(last=False)
        return entry

    def migrated(self, instance_id: int) -> None:
        self._entry(instance_id).migrated_requests += 1

    def failed(self, instance_id: int) -> None:
        self._entry(instance_id).failed_requests += 1

    def snapshot(self) -> dict[int, InstanceMigrations]:
        return {iid: InstanceMigrations(e.migrated_requests, e.failed_requests)
                for iid, e in sorted(self._by_instance.items())}
