"""Which recovery strategy runs on each instance, at most one. The strategy centre starts and ends
them; the hardware intake and the snapshot puller ask it first, since a running strategy takes new
evidence itself (a round absorbs late faults, a hardware fault becomes its evidence)."""

from __future__ import annotations

from motor.controller.fault_tolerance.strategy.base import Strategy


class RunningStrategies:
    def __init__(self) -> None:
        self._by_instance: dict[int, Strategy] = {}

    def get(self, instance_id: int) -> Strategy | None:
        return self._by_instance.get(instance_id)

    def busy(self, instance_id: int) -> bool:
        return instance_id in self._by_instance

    def begin(self, instance_id: int, strategy: Strategy) -> None:
        running = self._by_instance.get(instance_id)
        if running is not None:
            raise RuntimeError(f"instance {instance_id}: {running.name} is still running")
        self._by_instance[instance_id] = strategy

    def end(self, instance_id: int) -> None:
        self._by_instance.pop(instance_id, None)

    def note_hardware(self, instance_id: int, ranks: frozenset[int], description: str) -> None:
        """A mapped hardware fault on an instance with a running strategy: evidence for that strategy."""
        running = self._by_instance.get(instance_id)
        if running is not None:
            running.note_hardware(ranks, description)
