"""Headless Chromium for the operator console's browser tests: Debian's system `chromium` driven by
Playwright (no browser is downloaded; `make deps` installs chromium with apt). Playwright is a test
dependency: import this module from tests only."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from playwright.async_api import Browser, async_playwright
from playwright.sync_api import Browser as SyncBrowser
from playwright.sync_api import sync_playwright

# --no-sandbox: tests run as root in CI, where Chromium refuses its sandbox.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu"]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError("the console's browser tests need Debian's chromium (`make deps`, or apt-get install chromium)")
    return path


@asynccontextmanager
async def headless_chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@contextmanager
def headless_chromium_sync() -> Iterator[SyncBrowser]:
    """The same browser for a test without an event loop of its own (the e2e rows)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
