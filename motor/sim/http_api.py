"""The rank's aiohttp application: which routes exist depends on the flags."""

from __future__ import annotations

from aiohttp import web

from motor.sim.config import injection_refusal
from motor.sim.engine import SimEngine
from motor.sim.ft_api import add_ft_routes
from motor.sim.ft_state import FtDialect
from motor.sim.injection import add_admin_routes
from motor.sim.instance_link import INTERNAL_PREFIX
from motor.sim.openai_api import add_openai_routes


def build_app(engine: SimEngine) -> web.Application:
    cfg = engine.cfg
    app = web.Application(client_max_size=4 * 1024 * 1024)

    async def health(_: web.Request) -> web.Response:
        # Stays 200 while faulted (vLLM FT mode): liveness of the API, not of the DP domain.
        return web.Response(status=200)

    app.router.add_get("/health", health)
    add_openai_routes(app, engine)
    if cfg.enable_fault_tolerance:
        # SGLang's shape: the rank's own FT machine is the instance manager's, not a public API.
        add_ft_routes(app, engine, INTERNAL_PREFIX if cfg.ft_dialect is FtDialect.SGLANG else cfg.ft_api_prefix)
    if cfg.enable_fault_injection:
        # Tests and demos only: refused in production mode and on a wildcard address (checked at
        # start-up by parse_config, again here for a config built in code).
        refusal = injection_refusal(cfg)
        if refusal is not None:
            raise ValueError(refusal)
        add_admin_routes(app, engine)
    return app
