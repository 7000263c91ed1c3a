"""The reference engine's instance FT manager: SGLang's shape (PR #40078) over real ranks.

``python -m motor.sim.instance_ft --dp-size N --host H --port P`` serves, for the whole instance,

* ``GET {prefix}/status`` and ``POST {prefix}/apply`` exactly as SGLang's manager does
  (``motor.sim.instance_ft_state``; docs/engine-dialects.md);
* inference at the same address, SGLang's one HTTP endpoint for the instance: ``/v1/completions``,
  ``/v1/chat/completions`` and ``/v1/models``, forwarded to the rank ``routed_dp_rank`` names or
  to an active rank (``motor.sim.instance_ft_inference``); every rank's status is observed every
  ``WATCH_SEC`` for it;
* ``POST /motor/internal/ft/link`` where every rank started with ``--ft-dialect sglang
  --ft-manager-address H:P`` links itself (``motor.sim.instance_link``);
* with ``--enable-fault-injection``, ``POST /motor/admin/inject`` ``{"fault": "busy_next_applies",
  "count"}`` (the next applies answer 409) | ``{"fault": "fail_next_apply", "ft_error"}`` (the next
  accepted apply ends with that code) | ``{"fault": "clear"}``, and ``GET /motor/admin/state``
  (expected ranks, links, every apply received and its HTTP status, the inference requests pinned to
  and forwarded to each rank, the active ranks).

The ranks keep their own FT machine (the RFC dialect, at ``/motor/internal/ft``) and their real
gloo group: a ``scale_down`` here is sent, with the cumulative removed ranks, the new master (the
lowest survivor) and a store port of ``--dp-store-port-base`` + the number removed, to every
survivor, whose own rebuild decides; the manager polls them until each is healthy (success) or one
failed, died or the ``--ft-timeout-sec`` passed (``scale_down_failed: ...`` /
``scale_down_timed_out`` in ``ft_error``). A ``retry`` goes to every expected rank the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import urllib.parse
import uuid
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from motor.sim.instance_ft_inference import MAX_REQUEST_BYTES, InferenceFront, admin_counts
from motor.sim.instance_ft_state import ApplyRefused, InstanceApply, InstanceFtState, RankView, parse_apply
from motor.sim.instance_link import INTERNAL_PREFIX
from motor.sim.main import write_ready_file

log = logging.getLogger("motor.sim.instance_ft")

RANK_TIMEOUT_SEC = 1.0
POLL_SEC = 0.1
WATCH_SEC = 0.2


class InstanceFtManager:
    def __init__(self, state: InstanceFtState, *, timeout_sec: float, dp_store_port_base: int) -> None:
        self.state = state
        self._timeout_sec = timeout_sec
        self._store_base = dp_store_port_base
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=RANK_TIMEOUT_SEC))
        watcher = asyncio.create_task(self._watch())
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)

    async def _watch(self) -> None:
        """The ranks' statuses, for inference admission (each read bounded by RANK_TIMEOUT_SEC)."""
        while True:
            self.state.observe(await self.views())
            await asyncio.sleep(WATCH_SEC)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _view(self, url: str) -> RankView | None:
        assert self._session is not None
        try:
            async with self._session.get(url + "/status") as resp:
                entry = (await resp.json(content_type=None))["engines"][0]
                return RankView(entry["status"], entry.get("ft_state"), entry.get("ft_error"))
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, IndexError, TypeError):
            return None

    async def views(self) -> dict[int, RankView | None]:
        linked = self.state.linked(time.monotonic())
        ranks = sorted(linked)
        answers = await asyncio.gather(*(self._view(linked[r]) for r in ranks))
        return dict(zip(ranks, answers, strict=True))

    def submit(self, req: InstanceApply) -> tuple[int, dict]:
        status, body = self.state.admit(req)
        log.info("apply %s removed_dp_ranks=%s request_id=%r: HTTP %d", req.instruction, list(req.removed_dp_ranks),
                 req.request_id, status)
        if status == 202:
            task = asyncio.create_task(self._run(req))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return status, body

    async def _run(self, req: InstanceApply) -> None:
        error: str | None = "internal_error"
        try:
            error = self.state.precheck(req, await self.views())
            if error is None:
                error = await self._execute(req)
        finally:
            self.state.finish(req, error)
            log.log(logging.INFO if error is None else logging.WARNING, "apply %s request_id=%r finished: %s",
                    req.instruction, req.request_id, error or "ok")

    async def _execute(self, req: InstanceApply) -> str | None:
        assert self._session is not None
        linked = self.state.linked(time.monotonic())
        if req.instruction == "scale_down":
            targets = self.state.survivors(req)
            removed = self.state.removed_after(req)
            master = targets[0]
            if master not in linked:
                return f"scale_down_failed: rank {master} is not linked"
            params = {"removed_dp_ranks": removed, "dp_master_ip": urllib.parse.urlsplit(linked[master]).hostname,
                      "dp_store_port": self._store_base + len(removed)}
        else:
            targets = [r for r in range(self.state.dp_size) if self.state.expected[r]]
            params = {}
        rid = f"{req.request_id or 'ft'}-{uuid.uuid4().hex[:8]}"
        body = json.dumps({"instruction": req.instruction, "request_id": rid, "params": params})
        missing = [r for r in targets if r not in linked]
        if missing:
            return f"{req.instruction}_failed: ranks {missing} are not linked"

        async def send(rank: int) -> str | None:
            try:
                async with self._session.post(linked[rank] + "/apply", data=body,
                                              headers={"Content-Type": "application/json"}) as resp:
                    return None if resp.status == 202 else f"rank {rank} answered HTTP {resp.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return f"rank {rank} unreachable: {type(exc).__name__}"

        refused = [e for e in await asyncio.gather(*(send(r) for r in targets)) if e]
        if refused:
            return f"{req.instruction}_failed: " + "; ".join(refused)
        deadline = time.monotonic() + self._timeout_sec
        while time.monotonic() < deadline:
            await asyncio.sleep(POLL_SEC)
            views = {r: await self._view(linked[r]) for r in targets}
            for rank, view in views.items():
                if view is None or view.status == "dead" or view.ft_state == "failed":
                    why = "no answer" if view is None else (view.ft_error or view.status)
                    return f"{req.instruction}_failed: rank {rank}: {why}"
            if all(v is not None and v.status == "healthy" and v.ft_state is None for v in views.values()):
                return None
        return f"{req.instruction}_timed_out"


def build_app(manager: InstanceFtManager, prefix: str, injection: bool,
              front: InferenceFront | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    state = manager.state

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def status(_: web.Request) -> web.Response:
        return web.json_response(state.document(await manager.views()))

    async def apply(request: web.Request) -> web.Response:
        try:
            req = parse_apply(await request.read(), state.dp_size)
        except ApplyRefused as exc:
            return web.json_response({"message": str(exc)}, status=400)
        code, body = manager.submit(req)
        return web.json_response(body, status=code)

    async def link(request: web.Request) -> web.Response:
        doc = await request.json()
        rank, url, run = doc["rank"], doc["url"], doc["run"]
        if type(rank) is not int or not 0 <= rank < state.dp_size:
            return web.json_response({"message": f"rank {rank!r} out of range"}, status=400)
        if state.register(rank, url, run, time.monotonic()):
            log.info("rank=%d linked again with a new run %s: expected again", rank, run)
        return web.json_response({"ok": True})

    async def inject(request: web.Request) -> web.Response:
        doc = await request.json()
        fault = doc.get("fault")
        if fault == "busy_next_applies":
            state.busy_next = int(doc.get("count", 1))
        elif fault == "fail_next_apply":
            state.fail_next = str(doc.get("ft_error", "injected_failure"))
        elif fault == "clear":
            state.busy_next, state.fail_next = 0, None
        else:
            return web.json_response({"message": f"unknown fault {fault!r}"}, status=400)
        log.warning("fault injection: %s", doc)
        return web.json_response({"fault": fault})

    async def admin_state(_: web.Request) -> web.Response:
        return web.json_response({"expected": state.expected, "in_progress": state.in_progress,
                                  "links": {r: link.url for r, link in state.links.items()},
                                  "applies": state.journal, **admin_counts(state)})

    app.router.add_get("/health", health)
    app.router.add_get(f"{prefix}/status", status)
    app.router.add_post(f"{prefix}/apply", apply)
    app.router.add_post(f"{INTERNAL_PREFIX}/link", link)
    if front is not None:
        front.add_routes(app)
    if injection:
        app.router.add_post("/motor/admin/inject", inject)
        app.router.add_get("/motor/admin/state", admin_state)
    return app


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="motor-engine-sim-ft-manager", description=__doc__.split("\n\n")[0])
    p.add_argument("--dp-size", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--ft-api-prefix", default="/v1/fault_tolerance")
    p.add_argument("--ready-file", default=None)
    p.add_argument("--lease-sec", type=float, default=2.0, help="a rank whose link is older reads dead")
    p.add_argument("--ft-timeout-sec", type=float, default=30.0, help="bound on one apply's execution")
    p.add_argument("--dp-store-port-base", type=int, default=29600)
    p.add_argument("--inference-timeout-sec", type=float, default=600.0,
                   help="bound on one forwarded inference request, its whole answer included")
    p.add_argument("--enable-fault-injection", action="store_true")
    p.add_argument("--log-level", default="INFO")
    return p


async def _serve(ns: argparse.Namespace) -> int:
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    manager = InstanceFtManager(InstanceFtState(ns.dp_size, ns.lease_sec), timeout_sec=ns.ft_timeout_sec,
                                dp_store_port_base=ns.dp_store_port_base)
    front = InferenceFront(manager.state, timeout_sec=ns.inference_timeout_sec)
    await manager.start()
    await front.start()
    runner = web.AppRunner(build_app(manager, ns.ft_api_prefix, ns.enable_fault_injection, front),
                           access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, ns.host, ns.port).start()
        port = runner.addresses[0][1]
        if ns.ready_file:
            write_ready_file(ns.ready_file, {"port": port, "pid": os.getpid(), "host": ns.host})
        log.info("instance FT manager for dp_size=%d serving on http://%s:%d%s", ns.dp_size, ns.host, port,
                 ns.ft_api_prefix)
        await stop.wait()
        return 0
    finally:
        await runner.cleanup()
        await front.close()
        await manager.close()


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, ns.log_level),
                        format="%(asctime)s %(levelname)s %(name)s[pid=%(process)d]: %(message)s")
    return asyncio.run(_serve(ns))


if __name__ == "__main__":
    sys.exit(main())
