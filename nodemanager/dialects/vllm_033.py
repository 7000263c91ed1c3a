"""vLLM 0.33.0's released FT router: served under ``/fault_tolerance``, one instruction (``retry``),
``scale_down`` refused with 400 "Invalid instruction" (Motor turns that into a clean abort and a
whole-instance reconfiguration), the 202's ``request_id`` made by the server, and a body without
``Content-Type: application/json`` refused with ``detail`` as a list. The status entry is vLLM's.
No ``scale_up``: refused before anything is sent (``EngineDialect.check_supported``)."""

from __future__ import annotations

from nodemanager.dialects.base import EngineDialect


class Vllm033Dialect(EngineDialect):
    name = "vllm-0.33"
    default_prefix = "/fault_tolerance"
    supports_scale_up = False
