"""Headless Chromium for the console's browser tests: Debian's system `chromium` driven by
Playwright (no browser is downloaded; `make deps` installs chromium with apt)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Browser, async_playwright


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError("the console's browser tests need Debian's chromium (`make deps`, or apt-get install chromium)")
    return path


@asynccontextmanager
async def headless_chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # --no-sandbox: tests run as root in CI, where Chromium refuses its sandbox.
        browser = await playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                                   args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            await browser.close()
