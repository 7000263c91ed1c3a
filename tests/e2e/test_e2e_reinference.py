"""Zero lost requests when a rank dies under load (the Coordinator's
re-inference), and an idle death that still scales down (the Controller's opt-in idle-fault probe).

Re-inference: 8 concurrent requests, long enough to be mid-generation at the fault (the test waits
until the engines hold all of them), then executor death of rank 1. Every request succeeds, and its
text is exactly the reference engine's deterministic output for its prompt (the next toy token is a
function of the whole preceding text, as greedy decoding is), whether streamed (completions or
chat) or not. The round's timeline and the runtime count the requests the Coordinator migrated.
The streamed completions run on the reference engines (streams its real executor cuts, continued
from token ids); chat and non-streamed requests on the light engines (the same toy model, every
rank's requests cut as its group fails).

Idle death: with `idle_fault_probe` on, one canary through the Coordinator makes the survivors'
collective fail, so the instance scales down instead of reconfiguring; with it off the RFC's idle
row is tests/e2e/test_e2e_fallback.py::test_idle_death_no_transaction_then_reconfiguration, unchanged.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from motor.launch.load import RequestResult
from motor.sim.toy_model import expected_chat_completion, expected_completion

pytestmark = pytest.mark.timeout(300)

ROUND_SEC = 60.0
STREAMS = 8
TOKENS = 600  # several seconds at 5 ms per token in lockstep: every request is mid-generation at the fault


def _in_flight(cluster) -> int:
    total = 0
    for rank in range(cluster.spec.dp_size):
        state = cluster.engine_client(rank).request("GET", "/motor/admin/state").body
        total += state["in_flight_requests"]
    return total


def _wait(predicate, timeout_sec: float, what: str) -> None:
    deadline = time.monotonic() + timeout_sec
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_sec:g}s")
        time.sleep(0.05)


def _expected(result: RequestResult, chat: bool) -> str:
    if chat:
        return expected_chat_completion([{"role": "user", "content": result.prompt}], TOKENS)
    return expected_completion(result.prompt, TOKENS)


def _coordinator_metrics(cluster) -> str:
    with urllib.request.urlopen(f"{cluster.coordinator_http}/metrics", timeout=5,
                                context=cluster.http_context()) as resp:
        return resp.read().decode()


@pytest.mark.parametrize(("mode", "engines"), [("stream", "reference"), ("chat_stream", "light"),
                                               ("non_stream", "light")],
                         ids=["stream-reference", "chat_stream-light", "non_stream-light"])
def test_rank_death_under_load_loses_no_request(start_cluster, artifacts, mode: str, engines: str) -> None:
    cluster = start_cluster(engines=engines)
    chat = mode == "chat_stream"
    load = cluster.load_generator(concurrency=STREAMS, max_tokens=TOKENS, stream=mode != "non_stream", chat=chat,
                                  max_requests=STREAMS, request_timeout_sec=120).start()
    try:
        _wait(lambda: _in_flight(cluster) == STREAMS, 60, f"{STREAMS} requests generating on the engines")
        artifacts.injection(cluster, 1, "executor_death")
        rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
        load.stop(timeout_sec=120)
    finally:
        load.stop(timeout_sec=1)
    results = load.snapshot()
    data = artifacts.collect(cluster)
    artifacts.record("requests", [{"prompt": r.prompt, "status": r.status, "error": r.error, "rank": r.rank,
                                   "migrations": r.migrations, "chars": len(r.text)} for r in results])
    assert len(results) == STREAMS
    assert [r.error for r in results if not r.ok] == [], "no request failed"
    wrong = [r.prompt for r in results if r.text != _expected(r, chat)]
    assert not wrong, f"texts differ from the uninterrupted output for {wrong}"
    migrated = [r for r in results if r.migrations]
    assert migrated, "the fault hit requests in flight"
    assert all(r.migrations == 1 for r in migrated)
    txn = data["controller_timeline"][-1]
    assert txn["strategy"] == "dp_scale_down" and txn["outcome"] == "succeeded"
    assert [t["strategy"] for t in data["controller_timeline"]] == ["dp_scale_down"]
    note = next(e for e in txn["events"] if e["name"] == "reinference")
    assert note["migrated_requests"] == len(migrated), (note, len(migrated))
    # The runtime takes the count with the note, which may come after the view that wait_serving saw.
    rt = cluster.wait_until(lambda rt: rt["migrated_requests"] == len(migrated), 30.0, "the runtime's migrated count")
    path = "/v1/chat/completions" if chat else "/v1/completions"
    metrics = _coordinator_metrics(cluster)
    assert f'motor_coordinator_migrated_requests_total{{outcome="completed",path="{path}"}} {len(migrated)}.0' \
        in metrics
    assert "motor_coordinator_migrated_requests_total{outcome=\"failed\"" not in metrics
    artifacts.record("migrated_requests", len(migrated))


def test_idle_death_with_the_probe_scales_down(start_cluster, artifacts) -> None:
    cluster = start_cluster(controller_overrides={"fault_tolerance_config.idle_fault_probe": True})
    injected = time.time()
    artifacts.injection(cluster, 1, "executor_death")
    rt = cluster.wait_serving(ROUND_SEC, alive=[0, 2, 3])
    data = artifacts.collect(cluster)
    assert rt["phase"] == "SCALED_DOWN_RUNNING" and rt["dead_committed"] == [1]
    assert [(t["strategy"], t["outcome"]) for t in data["controller_timeline"]] == [("dp_scale_down", "succeeded")]
    txn = data["controller_timeline"][0]
    canaries = [e for e in txn["events"] if e["name"] == "canary"]
    assert len(canaries) == 1 and canaries[0]["outcome"] == "engine_failed", canaries
    assert canaries[0]["endpoint_ids"][0] in (0, 2, 3) and canaries[0]["target"] == cluster.coordinator_address
    assert rt["idle_fault_probes"] == 1
    dead = next(e for e in txn["events"] if e["event_kind"] == "EVIDENCE" and e["ranks"] == [1])
    published = next(e for e in txn["events"] if e["name"] == "publish")
    publish_end = published["at_unix_sec"] + published["duration_sec"]
    timings = {
        "injection_to_published_sec": publish_end - injected,
        "dead_evidence_to_published_sec": publish_end - dead["received_at_unix_sec"],
        "canary_to_published_sec": publish_end - canaries[0]["at_unix_sec"],
    }
    artifacts.record("idle_probe_timings", timings)
    print("idle-fault probe round:", json.dumps({k: round(v, 3) for k, v in timings.items()}))
    controller_metrics = cluster.scrape("controller")
    assert 'motor_idle_fault_probes_total{outcome="engine_failed"} 1.0' in controller_metrics
    load = cluster.load_generator(concurrency=1, max_tokens=4)
    after = [load.send_one(f"after the probe {i}") for i in range(4)]
    artifacts.data["inference_after_recovery"].extend({"status": r.status, "rank": r.rank} for r in after)
    assert all(r.ok and r.rank in (0, 2, 3) for r in after), [r.error for r in after]
