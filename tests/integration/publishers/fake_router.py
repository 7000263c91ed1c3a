"""A vllm-router worker API on a real aiohttp server (port 0), answering as vllm-router 0.1.17 does:
`POST /add_worker?url=` 200 "Successfully added worker: URL" or 400 "Worker URL already exists",
`POST /remove_worker?url=` 200 even for an unknown worker, `GET /list_workers` → {"urls": [...]}.
Every call is recorded with the worker list it left, so a test sees the order of the changes."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class FakeRouter:
    workers: list[str] = field(default_factory=list)
    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    # Answer every call with this status (e.g. 503) instead, as a router that is restarting.
    fail_status: int | None = None
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _add(self, request: web.Request) -> web.Response:
        return self._answer("add_worker", request, self._do_add)

    async def _remove(self, request: web.Request) -> web.Response:
        return self._answer("remove_worker", request, self._do_remove)

    async def _list(self, request: web.Request) -> web.Response:
        if self.fail_status is not None:
            self.calls.append(("list_workers", "", tuple(self.workers)))
            return web.Response(status=self.fail_status, text="unavailable")
        self.calls.append(("list_workers", "", tuple(self.workers)))
        return web.json_response({"urls": list(self.workers)})

    def _answer(self, name: str, request: web.Request, act) -> web.Response:
        worker = request.query.get("url", "")
        if self.fail_status is not None:
            self.calls.append((name, worker, tuple(self.workers)))
            return web.Response(status=self.fail_status, text="unavailable")
        status, text = act(worker)
        self.calls.append((name, worker, tuple(self.workers)))
        return web.Response(status=status, text=text)

    def _do_add(self, worker: str) -> tuple[int, str]:
        if worker in self.workers:
            return 400, f"Worker {worker} already exists"
        self.workers.append(worker)
        return 200, f"Successfully added worker: {worker}"

    def _do_remove(self, worker: str) -> tuple[int, str]:
        if worker in self.workers:
            self.workers.remove(worker)
        return 200, f"Successfully removed worker: {worker}"

    def named(self, name: str) -> list[tuple[str, str, tuple[str, ...]]]:
        return [c for c in self.calls if c[0] == name]

    async def start(self) -> FakeRouter:
        app = web.Application()
        app.router.add_post("/add_worker", self._add)
        app.router.add_post("/remove_worker", self._remove)
        app.router.add_get("/list_workers", self._list)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
