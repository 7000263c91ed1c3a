"""Re-inference counts per instance (pure)."""

from __future__ import annotations

from motor.coordinator.migration_ledger import MigrationLedger


def test_ledger_is_bounded_and_counts_per_instance() -> None:
    ledger = MigrationLedger(max_instances=2)
    for iid in (1, 2, 1, 3):
        ledger.migrated(iid)
    ledger.failed(3)
    snap = ledger.snapshot()
    assert sorted(snap) == [1, 3], "the least recently touched instance is dropped"
    assert (snap[1].migrated_requests, snap[3].migrated_requests, snap[3].failed_requests) == (2, 1, 1)
