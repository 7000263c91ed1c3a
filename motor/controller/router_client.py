"""vllm-router's worker API behind one client wrapper (the peer's calls, deadlines and retries).

vllm-router (PyPI, Rust) routes to the workers in its own list: `POST /add_worker?url=` (it waits
for the worker's /health first; 400 "already exists" for a known one), `POST /remove_worker?url=`
(200 even for an unknown one), `GET /list_workers` → `{"urls": [...]}`. The list lives in the
router's memory only. `motor.controller.publishers.vllm_router` keeps it equal to the serving view."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from motor.common.config.publication import VllmRouterConfig
from motor.common.security import read_key_file
from motor.controller.fencing import Leadership, NotLeaderError

log = logging.getLogger(__name__)


class RouterCallError(RuntimeError):
    """A worker-API call that failed after its tries; `retryable` false for an answer that a retry
    cannot change (a 4xx other than the idempotent ones)."""

    def __init__(self, call: str, target: str, detail: str, retryable: bool = True) -> None:
        self.call, self.target, self.retryable = call, target, retryable
        super().__init__(f"{call} to vllm-router {target} failed: {detail}")


class VllmRouterClient:
    """Every call has a deadline (request_timeout_sec per try) and at most `attempts` tries with a
    capped doubling backoff; with a Leadership, nothing is sent while this replica does not lead."""

    def __init__(self, config: VllmRouterConfig, leadership: Leadership | None = None,
                 on_call: Callable[[str, bool], None] = lambda call, ok: None) -> None:
        self.address = config.url
        self.config = self._config = config
        self._leadership = leadership
        # (call, succeeded) of every call after its tries: the publisher's metrics (set by its owner).
        self.on_call = on_call
        key = read_key_file(config.api_key_file, "publication.vllm_routers[].api_key_file") if config.api_key_file else None
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Opened lazily inside the running event loop.
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._config.request_timeout_sec),
                                                  headers=self._headers, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def _once(self, call: str, method: str, path: str, url: str | None) -> tuple[int, str]:
        if self._leadership is not None:
            try:
                self._leadership.check(f"{call} to vllm-router {self.address} not sent:")
            except NotLeaderError as exc:
                raise RouterCallError(call, self.address, str(exc), retryable=False) from None
        params = {"url": url} if url is not None else None
        try:
            async with self._open().request(method, self.address + path, params=params) as resp:
                return resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise RouterCallError(call, self.address, f"{type(exc).__name__}: {exc or 'timed out'}") from None

    async def _call(self, call: str, method: str, path: str, url: str | None = None,
                    accept: Callable[[int, str], bool] = lambda status, body: status == 200) -> str:
        cfg = self._config

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.info("vllm-router %s: %s%s try %d of %d failed, retrying: %s", self.address, call,
                     f" {url}" if url else "", state.attempt_number, cfg.attempts, exc)

        body = ""
        try:
            async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(cfg.attempts),
                    wait=wait_exponential(multiplier=cfg.backoff_initial_sec, max=cfg.backoff_max_sec),
                    retry=retry_if_exception(lambda e: isinstance(e, RouterCallError) and e.retryable),
                    before_sleep=log_retry, reraise=True):
                with attempt:
                    status, body = await self._once(call, method, path, url)
                    if not accept(status, body):
                        raise RouterCallError(call, self.address, f"HTTP {status}: {body.strip()[:200]}",
                                              retryable=status >= 500 or status == 429)
        except RouterCallError:
            self.on_call(call, False)
            raise
        return body

    async def list_workers(self) -> set[str]:
        body = await self._call("list_workers", "GET", "/list_workers")
        try:
            urls = json.loads(body)["urls"]
            listed = {str(u).rstrip("/") for u in urls}
        except (ValueError, KeyError, TypeError) as exc:
            self.on_call("list_workers", False)
            raise RouterCallError("list_workers", self.address, f"unexpected answer {body[:200]!r}: {exc}",
                                  retryable=False) from None
        self.on_call("list_workers", True)
        return listed

    async def add_worker(self, url: str) -> None:
        # A worker already in the list is what was asked for.
        await self._call("add_worker", "POST", "/add_worker", url,
                         accept=lambda status, body: status == 200 or (status == 400 and "already exists" in body))
        self.on_call("add_worker", True)

    async def remove_worker(self, url: str) -> None:
        await self._call("remove_worker", "POST", "/remove_worker", url)
        self.on_call("remove_worker", True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
