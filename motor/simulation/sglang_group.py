"""The simulated engines in SGLang's shape (PR #40078): the ranks of `SimGroup` (no diagnosing phase)
behind one instance FT manager, which answers every rank's status and takes one apply per round
(docs/engine-dialects.md). The NodeManager side reads it with the real `sglang` dialect module.

* Status: one entry per rank: `dead` when not expected (removed), its process down or its own state
  dead; `unhealthy` while its own state is; else `healthy`. `last_ft_request_id` / `ft_error` at the
  top level, set when an apply finishes and kept until the next one finishes.
* Apply: 400 `{"message"}` for a bad body or a rank out of range; 409 while one runs; else 202 and,
  after it, the error codes (`scale_down_requires_unresolved_expected_dp_fault`,
  `scale_down_requires_expected_ranks`, `cannot_scale_down_all_expected_ranks`), or the rebuild: the
  survivors turn healthy after `rebuild_sec`; a failed vote or a survivor lost meanwhile leaves them
  unhealthy with `scale_down_failed` in `ft_error`.
* A removed rank's process started again is expected again (as SGLang re-adds a recovered DP rank).
"""

from __future__ import annotations

import asyncio
import json

from motor.simulation.engines import Knobs, SimGroup


class SglangGroup(SimGroup):
    def __init__(self, ranks: list[int], dialect: str, knobs: Knobs, on_change=lambda: None) -> None:
        super().__init__(ranks, dialect, knobs, on_change)
        self.expected = {r: True for r in ranks}
        self.in_progress = False
        self.last_ft_request_id: str | None = None
        self.ft_error: str | None = None

    def spawn(self, rank: int, join: bool = False) -> None:
        super().spawn(rank, join)
        if not join and not self.in_progress:
            self.expected[rank] = True

    def _instance_status(self, rank: int) -> str:
        eng = self.engines[rank]
        if not self.expected[rank] or not eng.process_up or eng.status == "dead":
            return "dead"
        return "unhealthy" if eng.status in ("unhealthy", "diagnosing") else "healthy"

    def status_answer(self, rank: int) -> bytes | None:
        doc: dict[str, object] = {"schema_version": 1, "total_engines": len(self.engines),
                                  "engines": [{"id": r, "status": self._instance_status(r)} for r in sorted(self.engines)]}
        if self.last_ft_request_id is not None:
            doc["last_ft_request_id"] = self.last_ft_request_id
            if self.ft_error is not None:
                doc["ft_error"] = self.ft_error
        return json.dumps(doc).encode()

    def apply_reachable(self, rank: int) -> bool:
        return True  # the manager is the instance's HTTP server, not a rank's process

    def apply(self, rank: int, body: str) -> tuple[int, bytes]:
        try:
            doc = json.loads(body)
            instruction, request_id = doc["instruction"], doc.get("request_id", "")
            removed = [int(r) for r in doc["params"]["removed_dp_ranks"]] if instruction == "scale_down" else []
        except (ValueError, KeyError, TypeError) as exc:
            return 400, json.dumps({"message": f"malformed apply: {exc}"}).encode()
        if instruction not in ("retry", "scale_down"):
            return 400, json.dumps({"message": f"Invalid instruction: '{instruction}'."}).encode()
        if any(not 0 <= r < len(self.engines) for r in removed):
            return 400, json.dumps({"message": "'removed_dp_ranks' contains a rank out of range."}).encode()
        if self.in_progress:
            return 409, json.dumps({"message": "ft_operation_in_progress"}).encode()
        self.in_progress = True
        self._spawn_task(self._operate(instruction, request_id, removed))
        return 202, json.dumps({"message": "Request accepted; poll /v1/fault_tolerance/status for updates.",
                                "request_id": request_id}).encode()

    def _precheck(self, instruction: str, removed: list[int]) -> str | None:
        expected = [r for r in sorted(self.engines) if self.expected[r]]
        if all(self._instance_status(r) == "healthy" for r in expected):
            return f"{instruction}_requires_unresolved_expected_dp_fault"
        if instruction == "retry":
            return "retry_requires_all_expected_processes_alive" if any(
                self._instance_status(r) == "dead" for r in expected) else None
        if not removed:
            return "scale_down_requires_ranks"
        if any(not self.expected[r] for r in removed):
            return "scale_down_requires_expected_ranks"
        if not [r for r in expected if r not in removed]:
            return "cannot_scale_down_all_expected_ranks"
        return None

    async def _operate(self, instruction: str, request_id: str, removed: list[int]) -> None:
        error: str | None = "internal_error"
        try:
            error = self._precheck(instruction, removed)
            if error is None:
                error = await self._rebuild([r for r in sorted(self.engines) if self.expected[r] and r not in removed])
                if error is None:
                    for r in removed:
                        self.expected[r] = False
        finally:
            self.last_ft_request_id, self.ft_error, self.in_progress = request_id, error, False
            self._on_change()

    async def _rebuild(self, survivors: list[int]) -> str | None:
        runs = {r: self.engines[r] for r in survivors}
        await asyncio.sleep(self.knobs.rebuild_sec)
        lost = [r for r, eng in runs.items() if self.engines[r] is not eng or not eng.process_up or eng.status == "dead"]
        if lost or self.knobs.fail_next_vote:
            self.knobs.fail_next_vote = False
            return f"scale_down_failed: {f'ranks {lost} lost during the rebuild' if lost else 'the vote failed'}"
        for eng in runs.values():
            eng.set("healthy", dialect=self.dialect)
        self.members = set(survivors)
        return None
