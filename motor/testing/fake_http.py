"""Routes and process plumbing shared by the light fake engine's apps (`fake_engine`,
`fake_group_app`): health, exit on demand, a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import os
import signal

from aiohttp import web


async def health(_: web.Request) -> web.Response:
    return web.Response(status=200)


async def exit_soon(request: web.Request) -> web.Response:
    code = int((await request.json()).get("code", 1))
    # Later, so the answer still goes out.
    asyncio.get_running_loop().call_later(0.05, os._exit, code)
    return web.json_response({"exiting": code})


def stop_on_signals() -> asyncio.Event:
    """Set by SIGTERM or SIGINT, so the listeners are cleaned up rather than killed."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
