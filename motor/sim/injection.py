"""Fault injection (tests, demos): the ``/motor/admin/*`` routes (armed state: ``injection_state``).

The routes exist only when the engine runs with ``--enable-fault-injection``.

``POST /motor/admin/inject`` with ``{"fault": NAME, ...params}`` -> 200 ``{"fault", "rank", "injections"}``
or 400 ``{"detail"}``. Faults:

* ``kill_process`` – exit hard (SIGKILL of the executor, then of this process); routes unreachable.
* ``executor_death`` – SIGKILL the executor only: status ``dead``, API still up.
* ``hang_status`` ``{"duration_sec"?: >0}`` – ``GET {prefix}/status`` does not answer until the
  window ends (no duration: until ``clear``).
* ``unhealthy`` ``{"reason"?: str}`` – the executor tears its DP group down and the rank reports
  ``unhealthy`` (peers fail on their next collective).
* ``fail_next_apply`` ``{"reason"?: str}`` – the next accepted apply tears the group down (a
  ``scale_up`` survivor leaves it with its peers at one batch boundary) and ends ``failed`` with
  ``ft_error`` naming the injection; the other participants fail the round on its missing check-in.
* ``fail_vote`` ``{"reason"?: str}`` – in the next round this rank forms the new group, then votes
  against committing it: every participant's round fails (vllm dialect, scale_down and a scale_up's
  survivors: ``dead`` with "Recovery failed; full restart required"; otherwise ``unhealthy`` with
  ``ft_error``).
* ``stall_next_apply`` – the next accepted apply tears the group down (a ``scale_up`` survivor
  leaves it with its peers) and stays ``recovering``.
* ``slow_rebuild`` ``{"delay_sec": >=0}`` – every rebuild waits this long first (counts against
  ``--engine-recovery-timeout-sec``); 0 turns it off.
* ``clear`` – disarm everything above that is still armed and release hung status requests.

``GET /motor/admin/state`` -> internal details (group, dense rank, placement, wave counter, ...).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from motor.sim.engine import SimEngine
from motor.sim.injection_state import InjectionError, reason_param

ADMIN_PREFIX = "/motor/admin"
FAULTS = (
    "kill_process", "executor_death", "hang_status", "unhealthy",
    "fail_next_apply", "fail_vote", "stall_next_apply", "slow_rebuild", "clear",
)


def parse_inject_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InjectionError(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InjectionError(f"body must be a JSON object, got {type(body).__name__}")
    fault = body.get("fault")
    if fault not in FAULTS:
        raise InjectionError(f"unknown fault {fault!r}; expected one of: {', '.join(FAULTS)}")
    return body


def apply_injection(engine: SimEngine, body: dict[str, Any]) -> None:
    fault = body["fault"]
    if fault == "kill_process":
        engine.kill_process_soon()
    elif fault == "executor_death":
        engine.kill_executor()
    elif fault == "unhealthy":
        engine.inject_unhealthy(reason_param(body, "injected fault"))
    else:
        engine.injections.arm(fault, body)


def add_admin_routes(app: web.Application, engine: SimEngine) -> None:
    async def inject(request: web.Request) -> web.Response:
        try:
            body = parse_inject_body(await request.read())
            engine.log_injection(body)
            apply_injection(engine, body)
        except InjectionError as exc:
            return web.json_response({"detail": str(exc)}, status=400)
        return web.json_response(
            {"fault": body["fault"], "rank": engine.cfg.dp_rank, "injections": engine.injections.to_json()}
        )

    async def state(_: web.Request) -> web.Response:
        return web.json_response(engine.admin_state())

    app.router.add_post(f"{ADMIN_PREFIX}/inject", inject)
    app.router.add_get(f"{ADMIN_PREFIX}/state", state)
