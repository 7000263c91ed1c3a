"""An aiohttp app bound to a host:port of its own: the Coordinator's HTTP front and the metrics
listener of a service without an HTTP server (the NodeManager) start theirs through `start_site`."""

from __future__ import annotations

import ssl

from aiohttp import web


async def start_site(runner: web.AppRunner, host: str, port: int, ssl_context: ssl.SSLContext | None, *,
                     who: str, listener: str) -> int:
    """Sets `runner` up on host:port (port 0 picks a free one) and returns the port bound. A failed
    bind cleans the runner up and raises an OSError naming `who`, the `listener` and the address,
    which aiohttp's own error does not."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(f"{who}: cannot bind {listener} to {host}:{port}: {exc.strerror or exc}") from None
    return int(runner.addresses[0][1])
