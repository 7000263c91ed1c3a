"""The console's routes on the Controller's status listener (so the same TLS and role rules apply):

  GET /ui                         → /ui/
  GET /ui/                        the page (fleet and instance views, one document)
  GET /ui/static/<file>           its stylesheet and scripts, shipped in this package (no build step)
  GET /ui/events                  the live feed (Server-Sent Events, `feed.ConsoleFeed`)
  GET /ui/api/fleet               every row at once
  GET /ui/api/instance?instance_id=N   one instance's page document
"""

from __future__ import annotations

import json
from importlib import resources

from aiohttp import web

from motor.controller.console.feed import ConsoleFeed

# Every asset the page loads, by name → content type; nothing else is served from the package.
ASSETS = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "fleet.js": "text/javascript",
    "instance.js": "text/javascript",
}
# The page loads nothing from elsewhere; the policy says so to the browser too.
_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _bad_request(detail: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"detail": detail}), content_type="application/json")


def add_console_routes(app: web.Application, feed: ConsoleFeed) -> None:
    index = _asset("index.html")
    assets = {name: _asset(name) for name in ASSETS}
    headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff",
               "Cache-Control": "no-cache"}

    async def root(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def page(request: web.Request) -> web.Response:
        return web.Response(body=index, content_type="text/html", charset="utf-8", headers=headers)

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in assets:
            raise web.HTTPNotFound(text=json.dumps({"detail": f"no console asset {name!r}"}),
                                   content_type="application/json")
        return web.Response(body=assets[name], content_type=ASSETS[name], charset="utf-8", headers=headers)

    async def fleet(request: web.Request) -> web.Response:
        return web.json_response({**feed.hello(), "rows": list(feed.rows().values())})

    async def instance(request: web.Request) -> web.Response:
        raw = request.query.get("instance_id")
        if raw is None:
            raise _bad_request("instance_id is required")
        try:
            wanted = int(raw)
        except ValueError:
            raise _bad_request(f"instance_id {raw!r} is not an integer") from None
        doc = feed.instance(wanted)
        if doc is None:
            raise web.HTTPNotFound(text=json.dumps({"detail": f"unknown instance_id {wanted}"}),
                                   content_type="application/json")
        return web.json_response(doc)

    async def close_streams(app: web.Application) -> None:
        await feed.close()

    app.on_shutdown.append(close_streams)
    app.router.add_get("/ui", root)
    app.router.add_get("/ui/", page)
    app.router.add_get("/ui/static/{name}", static)
    app.router.add_get("/ui/events", feed.stream)
    app.router.add_get("/ui/api/fleet", fleet)
    app.router.add_get("/ui/api/instance", instance)
