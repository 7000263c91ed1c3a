"""SGLang's instance-level FT manager (PR #40078): one FT manager for every DP rank of the
instance, on the instance's HTTP server (docs/engine-dialects.md).

* Status: ``{"schema_version": 1, "total_engines": dp_size, "engines": [{"id", "status"}]}`` with one
  entry per rank (``healthy`` | ``unhealthy`` | ``dead``; no ``diagnosing``, ``ft_state`` or
  ``mask``) and, at the top level, ``last_ft_request_id`` / ``ft_error`` of the last finished apply,
  kept until the next one finishes. The identity check: exactly the instance's ranks, each once.
  Rank N's entry is Motor's status of rank N. A top-level error belongs to the request id beside
  it: read in the round of that id it is that round's failure (``ft_state`` ``failed``, quoting the
  code); any other reader sees it as the entry's ``ft_error`` only. Removed ranks stay ``dead``;
  the round never reads them (retired ranks are not polled, and "every survivor healthy" is asked of
  survivors).
* Apply: ``{"instruction", "params": {"removed_dp_ranks"}, "request_id"}`` once per round, to the
  manager, by the pod hosting the instance's lowest surviving rank; SGLang checks that every rank it
  is told to remove is still expected, so the list names this round's ranks only. 202 accepted; 409
  ``ft_operation_in_progress``: busy (sent again within the deadline); 400 ``{"message"}``: refused,
  the message quoted. Failures after the 202 are codes in ``ft_error``.
* No ``scale_up``: SGLang's manager re-admits no rank of a running instance; refused before
  anything is sent (``EngineDialect.check_supported``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from motor.common.text import shorten
from nodemanager.dialects.base import SCALE_DOWN, ApplyAnswer, EngineDialect, FtCommand
from nodemanager.engine_address import EngineAddress
from nodemanager.engine_answers import (
    EngineIdentityError,
    EngineStatusEntry,
    EngineStatusMalformed,
    parse_apply_answer,
)

STATUSES = ("healthy", "unhealthy", "dead")
BUSY_MESSAGE = "ft_operation_in_progress"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class SglangDialect(EngineDialect):
    name = "sglang"
    instance_level = True
    supports_scale_up = False

    def ft_address(self, endpoint_id: int, local_of: Callable[[int], EngineAddress | None]) -> EngineAddress | None:
        if local_of(endpoint_id) is None or self.manager_address is None:
            return None  # not launched here yet: nothing to ask about
        host, port = self.manager_address
        return EngineAddress(endpoint_id, host, port)

    def apply_targets(self, endpoint_ids: Sequence[int], command: FtCommand) -> list[int]:
        # One apply per round: the instance's lowest surviving rank's pod sends it, for every rank.
        survivors = sorted(set(range(self.dp_size)) - set(command.removed_dp_ranks))
        return [survivors[0]] if survivors and survivors[0] in endpoint_ids else []

    def params(self, command: FtCommand) -> dict[str, object]:
        if command.instruction != SCALE_DOWN:
            return {}
        return {"removed_dp_ranks": sorted(command.newly_removed_dp_ranks or command.removed_dp_ranks)}

    def apply_body(self, command: FtCommand) -> str:
        self.check_supported(command.instruction)
        return json.dumps({"instruction": command.instruction, "params": self.params(command),
                           "request_id": command.request_id})

    def parse_apply_answer(self, http_status: int, body: bytes) -> ApplyAnswer:
        accepted, rid, message = parse_apply_answer(http_status, body)
        return ApplyAnswer(accepted, rid, message, busy=http_status == 409)

    def parse_status(self, endpoint_id: int, http_status: int, body: bytes, observed_at_unix_sec: float = 0.0,
                     request_id: str = "") -> EngineStatusEntry:
        text = body.decode("utf-8", "replace")
        if http_status != 200:
            raise EngineStatusMalformed(endpoint_id, f"status route answered HTTP {http_status}: {shorten(text)!r}")
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            raise EngineStatusMalformed(endpoint_id, f"status body is not JSON: received {shorten(text)!r}") from None
        if not isinstance(doc, dict):
            raise EngineStatusMalformed(endpoint_id, f"status body is not a JSON object: received {shorten(text)!r}")
        engines = doc.get("engines")
        if not isinstance(engines, list) or not all(isinstance(e, dict) for e in engines):
            raise EngineStatusMalformed(endpoint_id, f"'engines' is not a list of objects: received {shorten(engines)}")
        total = doc.get("total_engines")
        if type(total) is not int or total != self.dp_size:
            raise EngineIdentityError(endpoint_id, f"total_engines is {shorten(total)}, expected the instance's "
                                                   f"dp_size {self.dp_size}")
        ids = [e.get("id") for e in engines]
        if not all(type(i) is int for i in ids):
            raise EngineIdentityError(endpoint_id, f"an engines[].id is missing or not an integer: received {ids}")
        if sorted(ids) != list(range(self.dp_size)):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            missing = sorted(set(range(self.dp_size)) - set(ids))
            unknown = sorted(set(ids) - set(range(self.dp_size)))
            raise EngineIdentityError(endpoint_id, f"engines ids {ids} are not the instance's ranks 0..{self.dp_size - 1}"
                                                   f" each once (duplicate {duplicates}, missing {missing}, unknown "
                                                   f"{unknown})")
        entry = engines[ids.index(endpoint_id)]
        status = entry.get("status")
        if status not in STATUSES:
            raise EngineStatusMalformed(endpoint_id, f"engines[{ids.index(endpoint_id)}].status is "
                                                     f"{shorten(status)}, not one of {list(STATUSES)}")
        for key in ("last_ft_request_id", "ft_error"):
            if doc.get(key) is not None and not isinstance(doc[key], str):
                raise EngineStatusMalformed(endpoint_id, f"{key} must be a string, received {shorten(doc[key])}")
        last_id, error = _text(doc.get("last_ft_request_id")), _text(doc.get("ft_error"))
        # The sticky error is this round's failure only when it names this round's request.
        failed = bool(request_id) and last_id == request_id and error is not None
        return EngineStatusEntry(
            id=endpoint_id, status=status, ft_state="failed" if failed else None,
            fault_info=_text(entry.get("fault_info")), last_ft_request_id=last_id, ft_error=error,
            observed_at_unix_sec=observed_at_unix_sec,
        )
