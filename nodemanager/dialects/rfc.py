"""The RFC's vLLM-Ascend dialect: one FT endpoint per DP rank, ``ft_state`` (``recovering`` while an
apply runs, ``failed`` when it failed), ``last_ft_request_id`` kept across status changes, and
``scale_down`` params that also name the new TCPStore master's rank, ``dp_master_rank``, beside
``dp_master_ip`` (as Huawei's MindIE-Motor sends them) and the pod's ``dp_store_port``."""

from __future__ import annotations

from nodemanager.dialects.base import SCALE_DOWN, EngineDialect, FtCommand


class RfcDialect(EngineDialect):
    name = "rfc"

    def params(self, command: FtCommand) -> dict[str, object]:
        params = super().params(command)
        if command.instruction == SCALE_DOWN:
            params["dp_master_rank"] = command.dp_master_rank
        return params
