"""The errors every runtime store raises, so callers handle both backends alike."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The backend failed (unreachable, timed out, corrupt data); the message names the key."""


class StaleWriteError(StoreError):
    """A compare-and-set lost: the stored generation is not the one the writer expected."""

    def __init__(
        self,
        message: str,
        *,
        instance_id: int | None = None,
        expected_generation: int | None = None,
        actual_generation: int | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        # None means "no record" on either side.
        self.expected_generation = expected_generation
        self.actual_generation = actual_generation


class FencedWriteError(StoreError):
    """A write refused because this Controller replica does not lead (any more): refused locally
    (its lease deadline passed) or by etcd (the leader key is not its term's). Never retried."""


def stale_write(instance_id: int, op: str, expected: int | None, actual: int | None) -> StaleWriteError:
    """The error for a lost compare-and-set, worded the same by every backend."""
    def show(gen: int | None) -> str:
        return "no record" if gen is None else f"generation {gen}"

    return StaleWriteError(
        f"instance {instance_id}: stale {op} refused: expected {show(expected)}, stored {show(actual)}",
        instance_id=instance_id, expected_generation=expected, actual_generation=actual,
    )
