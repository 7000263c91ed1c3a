"""What every engine FT dialect provides (docs/engine-dialects.md): Motor's commands → the engine's
requests, the engine's answers → Motor's typed engine states.

The round (``nodemanager.ft_proxy``, ``nodemanager.ft_poller``) only calls these methods; it never
asks which dialect it speaks. A per-rank dialect (vLLM, the RFC's) has one FT endpoint per DP rank;
an instance-level one (SGLang's) one FT manager for every rank of the instance, so the addresses, the
apply's targets and the identity check differ, and the round does not notice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from nodemanager.engine_address import EngineAddress
from nodemanager.engine_answers import EngineStatusEntry, parse_apply_answer, parse_status

SCALE_DOWN = "scale_down"
RETRY = "retry"
SCALE_UP = "scale_up"


class UnsupportedInstruction(ValueError):
    """The dialect's engines do not take the instruction (refused before anything is sent)."""


@dataclass(frozen=True)
class FtCommand:
    """One instruction of a round, dialect-neutral (ranks are original global DP ranks)."""

    instruction: str  # SCALE_DOWN | RETRY | SCALE_UP
    request_id: str
    # SCALE_UP: the ranks still removed after the round (possibly none).
    removed_dp_ranks: tuple[int, ...] = ()
    dp_master_ip: str = ""
    dp_master_rank: int = 0
    dp_store_port: int = 0
    # This round's ranks only: the Controller's round_removed_dp_ranks, else the cumulative list minus
    # what this pod saw committed. For engines that take only the ranks still expected.
    newly_removed_dp_ranks: tuple[int, ...] = ()
    # SCALE_UP: the original ranks the round re-admits (the joiners of every pod).
    added_dp_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class ApplyAnswer:
    accepted: bool
    engine_request_id: str
    message: str
    # The engine runs another FT operation (SGLang's 409): the same request may be sent again
    # within the call's deadline; never a refusal of the command itself.
    busy: bool = False


class EngineDialect:
    """The per-rank default: one FT endpoint per rank, vLLM's status entry, vLLM's apply body."""

    name: ClassVar[str] = ""
    instance_level: ClassVar[bool] = False
    # The route prefix the engine family serves by default (the configuration may override it).
    default_prefix: ClassVar[str] = "/v1/fault_tolerance"
    # Elastic scale-up (docs/engine-protocol-scale-up.md): the engines take `scale_up` and their
    # processes start in join mode.
    supports_scale_up: ClassVar[bool] = True

    def __init__(self, dp_size: int, manager_address: tuple[str, int] | None = None) -> None:
        self.dp_size = dp_size
        self.manager_address = manager_address

    def ft_address(self, endpoint_id: int, local_of: Callable[[int], EngineAddress | None]) -> EngineAddress | None:
        """Where rank `endpoint_id`'s FT status and commands go; None while it has no address."""
        return local_of(endpoint_id)

    def apply_targets(self, endpoint_ids: Sequence[int], command: FtCommand) -> list[int]:
        """The ranks (among this pod's survivors) whose FT address gets one POST of the command."""
        return list(endpoint_ids)

    def parse_status(self, endpoint_id: int, http_status: int, body: bytes, observed_at_unix_sec: float = 0.0,
                     request_id: str = "") -> EngineStatusEntry:
        """The answer of `endpoint_id`'s status route → its identity-checked entry (or a protocol error).
        `request_id`: the round's id, when a round reads (an instance-level error is judged by it)."""
        return parse_status(endpoint_id, http_status, body, observed_at_unix_sec)

    def check_supported(self, instruction: str) -> None:
        """UnsupportedInstruction when the dialect's engines do not take `instruction`."""
        if instruction == SCALE_UP and not self.supports_scale_up:
            raise UnsupportedInstruction(f"the engine FT dialect {self.name!r} has no scale_up (its engines "
                                         "answer 400 \"Invalid instruction\"); capacity comes back by a planned "
                                         "restoration")

    def params(self, command: FtCommand) -> dict[str, object]:
        if command.instruction == SCALE_UP:
            return {"added_dp_ranks": sorted(command.added_dp_ranks),
                    "removed_dp_ranks": sorted(command.removed_dp_ranks), "dp_master_ip": command.dp_master_ip,
                    "dp_store_port": command.dp_store_port}
        if command.instruction != SCALE_DOWN:
            return {}
        return {"removed_dp_ranks": sorted(command.removed_dp_ranks), "dp_master_ip": command.dp_master_ip,
                "dp_store_port": command.dp_store_port}

    def apply_body(self, command: FtCommand) -> str:
        """The exact JSON sent (the same to every target of a round); UnsupportedInstruction for an
        instruction the dialect does not take."""
        self.check_supported(command.instruction)
        return json.dumps({"instruction": command.instruction, "request_id": command.request_id,
                           "params": self.params(command)})

    def parse_apply_answer(self, http_status: int, body: bytes) -> ApplyAnswer:
        accepted, rid, message = parse_apply_answer(http_status, body)
        return ApplyAnswer(accepted, rid, message)
