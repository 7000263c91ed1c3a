"""A rank's link to the instance FT manager (``--ft-dialect sglang``): every ``LINK_INTERVAL_SEC``
the rank tells the manager where its own FT routes are (``INTERNAL_PREFIX``) and which run it is,
as SGLang's watchdogs heartbeat to the manager; a link that stops is the manager's evidence of a
dead process."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import aiohttp

from motor.sim.instance_ft_state import LINK_INTERVAL_SEC

log = logging.getLogger("motor.sim.instance_link")

# Where an SGLang-shaped rank serves its own FT machine (the manager's view of it, not Motor's).
INTERNAL_PREFIX = "/motor/internal/ft"


async def link_forever(manager_address: str, rank: int, host: str, port: int) -> None:
    """Runs until cancelled; each attempt bounded by the interval."""
    run = f"{os.getpid()}-{time.time_ns()}"
    url = f"http://{manager_address}{INTERNAL_PREFIX}/link"
    doc = {"rank": rank, "url": f"http://{host}:{port}{INTERNAL_PREFIX}", "run": run}
    failures = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=LINK_INTERVAL_SEC)) as session:
        while True:
            try:
                async with session.post(url, json=doc) as resp:
                    await resp.read()
                if failures:
                    log.info("rank=%d linked to the instance FT manager %s again", rank, manager_address)
                failures = 0
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                failures += 1
                if failures == 1:
                    log.warning("rank=%d instance FT manager %s unreachable: %s", rank, manager_address, exc)
            await asyncio.sleep(LINK_INTERVAL_SEC)
