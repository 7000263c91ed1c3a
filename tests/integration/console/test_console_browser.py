"""The console's page in headless Chromium against the real console routes and page code, fed a
synthetic fleet: the 64 × 256 render and one live update (timed, printed), keyboard navigation,
1280-px and phone widths, the standby banner, and the reconnect after the server went away."""

from __future__ import annotations

import time

import pytest
from aiohttp.test_utils import TestServer

from motor.testing.browser import headless_chromium

from .fleet import SyntheticFleet

pytestmark = pytest.mark.timeout(120)


async def _open(browser, server: TestServer, width: int = 1280, height: int = 900):
    page = await browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    await page.goto(str(server.make_url("/ui/")))
    return page, errors


async def test_a_fleet_of_64_by_256_ranks_renders_and_updates_live(tmp_path) -> None:
    fleet = SyntheticFleet(64, 256)
    server = await fleet.serve()
    async with headless_chromium() as browser:
        try:
            t0 = time.perf_counter()
            page, errors = await _open(browser, server)
            await page.wait_for_function("() => document.querySelectorAll('.cells .c').length === 64 * 256")
            loaded_ms = (time.perf_counter() - t0) * 1000
            render_ms = await page.evaluate("window.motorConsole.fleet.timings.initialRenderMs")
            t1 = time.perf_counter()
            fleet.scale_down(37, 200, commit=False)
            cell = '.row[data-instance="37"] .c[data-rank="200"]'
            await page.wait_for_selector(f'{cell}[data-state="dead"]')
            pushed_ms = (time.perf_counter() - t1) * 1000
            update_ms = await page.evaluate("window.motorConsole.fleet.timings.lastUpdateMs")
            print(f"\nconsole 64x256: page load to every cell drawn {loaded_ms:.0f} ms (fleet render in the page "
                  f"{render_ms:.1f} ms); one change to its cell redrawn {pushed_ms:.0f} ms (row update in the page "
                  f"{update_ms:.2f} ms, coalescing 50 ms included)")
            assert await page.get_attribute(cell, "title") == "rank 200: dead"
            label = await page.get_attribute('.row[data-instance="37"]', "aria-label")
            assert "SCALING_DOWN" in label and "255 healthy, 1 dead" in label, label
            summary = await page.text_content("#summary")
            assert summary.startswith("64 instances, 1 degraded; 16384 ranks: 16383 healthy, 1 dead"), summary
            await page.screenshot(path=str(tmp_path / "fleet-64x256.png"))
            assert not errors, errors
        finally:
            await server.close()


async def test_keyboard_instance_page_and_widths(tmp_path) -> None:
    fleet = SyntheticFleet(3, 4)
    fleet.scale_down(1, 1, commit=False)
    fleet.scale_down(1, 1, commit=True)
    server = await fleet.serve()
    async with headless_chromium() as browser:
        try:
            page, errors = await _open(browser, server)
            await page.wait_for_selector('.row[data-instance="3"]')
            await page.focus('.row[data-instance="1"] .row-head')
            await page.keyboard.press("ArrowDown")
            await page.keyboard.press("ArrowDown")
            assert await page.evaluate("document.activeElement.closest('.row').dataset.instance") == "3"
            # The link read aloud says the ranks' states in words too.
            assert (await page.text_content('.row[data-instance="1"] .row-head .sr')) == "; ranks: 3 healthy, 1 retired"
            await page.keyboard.press("ArrowUp")
            await page.keyboard.press("Enter")
            await page.wait_for_function("() => location.hash === '#/instance/2'")
            await page.wait_for_selector("#instance-body .facts")
            await page.keyboard.press("Escape")
            await page.wait_for_function("() => !document.getElementById('fleet-view').hidden")
            assert await page.evaluate("document.activeElement.closest('.row').dataset.instance") == "2"
            # Instance 1: retired rank, SCALED_DOWN_RUNNING, the round's stage bars in motorctl's order.
            await page.click('.row[data-instance="1"] .row-head')
            await page.wait_for_selector(".stage-bar[data-stage='publish']")
            assert await page.text_content("[data-field=phase]") == "SCALED_DOWN_RUNNING"
            stages = await page.eval_on_selector_all(".txn .stage-bar", "bars => bars.map(b => b.dataset.stage)")
            assert stages == ["detection", "decision", "guard", "apply_ready", "apply", "rebuild", "commit", "publish"]
            assert await page.get_attribute(".big-cells .c[data-rank='1']", "title") == "rank 1: retired"
            width = await page.eval_on_selector(".stage-bar[data-stage='rebuild']", "b => b.getBoundingClientRect().width")
            assert width > 20  # placed through the CSSOM (the policy refuses inline styles)
            await page.screenshot(path=str(tmp_path / "instance-1280.png"), full_page=True)
            for w in (1280, 390):
                await page.set_viewport_size({"width": w, "height": 844})
                for view in ("#/instance/1", "#/"):
                    await page.evaluate(f"location.hash = '{view}'")
                    await page.wait_for_timeout(50)  # one layout pass; what follows reads the result
                    overflow = await page.evaluate("document.documentElement.scrollWidth - innerWidth")
                    assert overflow <= 0, (w, view, overflow)
            await page.screenshot(path=str(tmp_path / "fleet-phone.png"), full_page=True)
            legend = await page.eval_on_selector_all("#legend b", "els => els.map(e => e.textContent)")
            assert legend == ["healthy", "diagnosing", "unhealthy", "dead", "retired", "restarting"]
            assert not errors, errors
        finally:
            await server.close()


async def test_a_standby_says_so_and_links_the_leader() -> None:
    fleet = SyntheticFleet(1, 4, leadership={"election_enabled": True, "is_leader": False, "replica_id": "ctl-b",
                                             "address": "127.0.0.1:1", "leader_id": "ctl-a",
                                             "leader_address": "127.0.0.9:50051", "term": 3})
    server = await fleet.serve()
    async with headless_chromium() as browser:
        try:
            page, errors = await _open(browser, server)
            await page.wait_for_selector("#standby:not([hidden])")
            assert "is a standby" in await page.text_content("#standby")
            href = await page.get_attribute("#leader-link", "href")
            assert href == f"http://127.0.0.9:{server.port}/ui/"
            assert await page.text_content("#replica") == "replica ctl-b: standby"
            # Leadership moves to this replica: the feed says so within a refresh, without a reload.
            fleet.leadership = dict(fleet.leadership, is_leader=True, leader_id="ctl-b", term=4)
            await page.wait_for_selector("#standby[hidden]", state="attached")
            assert await page.text_content("#replica") == "replica ctl-b: leader, term 4"
            assert not errors, errors
        finally:
            await server.close()


async def test_the_page_reconnects_when_the_controller_comes_back() -> None:
    fleet = SyntheticFleet(2, 4)
    server = await fleet.serve()
    port = server.port
    async with headless_chromium() as browser:
        page, _ = await _open(browser, server)
        await page.wait_for_selector("#conn[data-state='live']")
        await server.close()
        await page.wait_for_selector("#conn[data-state='reconnecting']")
        fleet.scale_down(2, 3, commit=False)  # changed while the page was cut off
        server = await fleet.serve(port=port)
        try:
            await page.wait_for_selector("#conn[data-state='live']")
            await page.wait_for_selector('.row[data-instance="2"] .c[data-rank="3"][data-state="dead"]')
        finally:
            await server.close()
