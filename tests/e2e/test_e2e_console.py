"""The operator console in headless Chromium against a live local cluster (light engines, pods on
127.0.0.60/.61): the fleet page shows the instance's 4 ranks healthy; after the executor death of
rank 1 its cell turns dead (the round removes it) and then retired (committed), without a reload;
the instance page shows SCALED_DOWN_RUNNING and the round's stage bars, the stages `motorctl
timeline` draws from the same typed timeline. A screenshot of each state goes to the test's
artifact folder."""

from __future__ import annotations

import pytest

from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.common.security import Role
from motor.controller.fault_tolerance.stages import transaction_stages
from motor.testing.browser import headless_chromium_sync

from .conftest import light_engines

pytestmark = pytest.mark.timeout(180)

# The survivors' rebuild takes this long, so the round holds rank 1 "dead" (removal pending) long
# enough for a person, and the screenshot, to see it.
REBUILD_SEC = 1.0
WAIT_MS = 60_000


def _cell(iid: int, rank: int, state: str) -> str:
    return f'.row[data-instance="{iid}"] .c[data-rank="{rank}"][data-state="{state}"]'


def _client_certificate(cluster) -> dict:
    """Under the mtls transport (MOTOR_E2E_MTLS=all) the browser presents the monitor certificate; the
    dev CA is not in its trust store, and the server's identity is not what this row checks."""
    if cluster.pki is None:
        return {}
    origin = cluster.controller_http
    return {"ignore_https_errors": True, "client_certificates": [{
        "origin": origin, "certPath": str(cluster.pki.cert_file(Role.MONITOR)),
        "keyPath": str(cluster.pki.key_file(Role.MONITOR))}]}


def test_console_follows_a_scale_down_live(start_cluster, artifacts, run_dir) -> None:
    cluster = start_cluster(light_engines(rebuild_sec=REBUILD_SEC), first_pod_ip=60)
    iid = cluster.spec.instance_id
    url = f"{cluster.controller_http}/ui/"
    artifacts.record("console_url", url)
    with headless_chromium_sync() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800}, **_client_certificate(cluster))
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        for rank in range(4):
            page.wait_for_selector(_cell(iid, rank, "healthy"), timeout=WAIT_MS)
        assert "4/4 alive" in page.text_content(f'.row[data-instance="{iid}"] .row-head')
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads
        page.screenshot(path=str(run_dir / "console-1-healthy.png"))

        artifacts.injection(cluster, 1, "executor_death")
        page.wait_for_selector(_cell(iid, 1, "dead"), timeout=WAIT_MS)
        page.screenshot(path=str(run_dir / "console-2-dead.png"))
        page.wait_for_selector(_cell(iid, 1, "retired"), timeout=WAIT_MS)
        for rank in (0, 2, 3):
            page.wait_for_selector(_cell(iid, rank, "healthy"), timeout=WAIT_MS)
        page.screenshot(path=str(run_dir / "console-3-retired.png"))
        assert page.evaluate("window.__sameDocument") is True
        # What the page received for rank 1, in order: healthy, then dead, then retired (no reload).
        seen = page.evaluate(f"window.motorConsole.state.log.filter(e => e.instance_id === {iid}).map(e => e.cells[1])")
        states = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
        assert states[0] == "h" and states[-1] == "r" and "d" in states[:-1], seen

        page.click(f'.row[data-instance="{iid}"] .row-head')
        page.wait_for_selector(".txn[data-strategy='dp_scale_down'] .stage-bar[data-stage='publish']", timeout=WAIT_MS)
        assert page.text_content("[data-field=phase]") == "SCALED_DOWN_RUNNING"
        assert page.text_content("[data-field=dead_committed]") == "[1]"
        drawn = page.eval_on_selector_all(".txn[data-strategy='dp_scale_down']:first-of-type .stage-bar",
                                          "bars => bars.map(b => b.dataset.stage)")
        page.screenshot(path=str(run_dir / "console-4-instance.png"), full_page=True)
        assert not errors, errors
    with cluster.grpc_channel(cluster.controller_address) as channel:
        resp = controller_pb2_grpc.ControllerStub(channel).GetTimeline(
            controller_pb2.GetTimelineRequest(instance_id=iid, limit=1), timeout=10)
    expected = [s.name for s in transaction_stages(resp.transactions[-1])]
    artifacts.record("console_stages", drawn)
    assert drawn == expected and expected[-1] == "publish", (drawn, expected)
