"""Who may use the Coordinator's HTTP front, and how many at once: inference API keys, the
concurrency limit, and the role check of the admin pages.

* API keys (vLLM's ``--api-key`` convention): with ``api_key_file`` set, every ``/v1/`` route needs
  ``Authorization: Bearer <key>`` with one of the file's keys (one per line, ``#`` comments); else 401
  in the OpenAI shape. The file is read again when its modification time or size changes (one
  stat per request, nothing beside an inference), so a key is added or revoked without a restart. The client's key is not
  passed on to the engines: it is the Coordinator's credential, not theirs.
* Concurrency: at most ``max_concurrent_requests`` inference requests are served at once; one more
  is answered 429 with ``Retry-After`` before its body is read, so a flood neither fills memory
  with bodies nor holds the event loop parsing them.
* Admin pages (``/metrics``, ``/coordinator/instances``: they list engine addresses) need a client
  certificate of an allowed role when ``security`` is on (403 otherwise); inference stays open to
  clients without one unless ``require_client_cert_on_inference``.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from motor.common.config.loader import ConfigError
from motor.coordinator.openai_format import KEY_CHECKED, openai_error

log = logging.getLogger(__name__)

INFERENCE_PREFIX = "/v1/"
ADMIN_PATHS = frozenset({"/metrics", "/coordinator/instances"})
# Bounds of one key file: keys are short tokens, not documents.
MAX_KEY_FILE_BYTES = 1024 * 1024


class ApiKeys:
    """The inference keys of one file, read again when the file changes."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._keys: tuple[bytes, ...] = ()
        self.refresh(force=True)
        if not self._keys:
            raise ConfigError(f"api_key_file {self.path} holds no key")

    def refresh(self, force: bool = False) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp and not force:
                return
            if st.st_size > MAX_KEY_FILE_BYTES:
                raise ValueError(f"larger than {MAX_KEY_FILE_BYTES} bytes")
            text = self.path.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            if force:
                raise ConfigError(f"api_key_file {self.path} unreadable: {exc}") from exc
            log.error("api_key_file %s unreadable, the keys read before stay: %s", self.path, exc)
            return
        keys = tuple(line.strip().encode() for line in text.splitlines()
                     if line.strip() and not line.strip().startswith("#"))
        if not keys and not force:
            log.error("api_key_file %s holds no key now, the keys read before stay", self.path)
            return
        if self._stamp is not None:
            log.info("api_key_file %s read again: %d keys", self.path, len(keys))
        self._stamp, self._keys = stamp, keys

    def allows(self, authorization: str | None) -> bool:
        self.refresh()
        if not authorization or not authorization.startswith("Bearer "):
            return False
        given = authorization[len("Bearer "):].strip().encode()
        # Every key is compared, in constant time, so the answer's timing says nothing about them.
        found = False
        for key in self._keys:
            found |= hmac.compare_digest(given, key)
        return found


class ConcurrencyLimit:
    def __init__(self, limit: int, retry_after_sec: int) -> None:
        self.limit = limit
        self.retry_after_sec = retry_after_sec
        self.active = 0
        self.refused = 0


def admission_middleware(limit: ConcurrencyLimit, api_keys: ApiKeys | None,
                         on_refused: Callable[[str], None] = lambda reason: None):
    """aiohttp middleware of the inference routes: the API key, then the concurrency limit."""

    @web.middleware
    async def admit(request: web.Request, handler):
        if not request.path.startswith(INFERENCE_PREFIX):
            return await handler(request)
        if api_keys is not None and not api_keys.allows(request.headers.get("Authorization")):
            on_refused("api_key")
            return openai_error(401, "Invalid or missing API key: send `Authorization: Bearer <key>`.",
                                "invalid_request_error", "invalid_api_key",
                                headers={"WWW-Authenticate": "Bearer"})
        if api_keys is not None:
            request[KEY_CHECKED] = True
        if request.method != "POST":
            return await handler(request)
        if limit.active >= limit.limit:
            limit.refused += 1
            on_refused("concurrency")
            return openai_error(429, f"The Coordinator serves {limit.limit} requests at once; retry in "
                                     f"{limit.retry_after_sec}s.", "rate_limit_error", "too_many_requests",
                                headers={"Retry-After": str(limit.retry_after_sec)})
        limit.active += 1
        try:
            return await handler(request)
        finally:
            limit.active -= 1

    return admit

