"""vLLM's scale-down PR (#46370): one FT endpoint per DP rank (external-LB mode), the status entry
replaced whole on every change (``diagnosing`` before a verdict, no ``ft_state``), ``scale_down``
with ``dp_master_ip`` and ``dp_store_port``, refusals as FastAPI's ``detail``. The base class is
exactly this dialect; the module names it. A whitespace-only ``request_id`` is refused by its router
(400): Motor never sends one (``nodemanager.guard.check_request_id``)."""

from __future__ import annotations

from nodemanager.dialects.base import EngineDialect


class VllmDialect(EngineDialect):
    name = "vllm"
