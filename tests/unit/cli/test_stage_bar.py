"""The stage bar of a transaction, and `motorctl timeline --follow` against a grpc_testing channel: each
transaction printed once, when it has finished, with its stage bar."""

from __future__ import annotations

import io
import threading

import grpc
import grpc_testing

from gen.motor.v1 import controller_pb2
from motor.cli.motorctl import run
from motor.cli.stage_bar import duration_text, stage_bar

CONTROLLER = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
K = controller_pb2.TimelineEventKind
T0 = 1_700_000_000.0


def scale_down(request_id: str, start: float, ended: bool = True) -> controller_pb2.Transaction:
    """A round: evidence at +0 (received +0.01), decided +0.05, then each step; published at +1.0."""
    txn = controller_pb2.Transaction(request_id=request_id, strategy="dp_scale_down", started_at_unix_sec=T0 + start + 0.05,
                                     ended_at_unix_sec=T0 + start + 1.0 if ended else 0.0,
                                     outcome="succeeded" if ended else "running")
    txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_EVIDENCE, name="DEAD", at_unix_sec=T0 + start,
                   observed_at_unix_sec=T0 + start, received_at_unix_sec=T0 + start + 0.01)
    for name, at, took, commit in (("guard", 0.05, 0.01, False), ("status", 0.06, 0.01, False),
                                   ("drain", 0.07, 0.01, False), ("apply", 0.08, 0.02, False),
                                   ("status", 0.10, 0.80, False), ("finalize", 0.90, 0.05, True),
                                   ("publish", 0.95, 0.05, False)):
        if not ended and name in ("finalize", "publish"):
            continue
        txn.events.add(event_kind=K.TIMELINE_EVENT_KIND_CALL, name=name, at_unix_sec=T0 + start + at,
                       duration_sec=took, outcome="ok", commit=commit)
    return txn


def test_stage_bar_places_every_stage_on_one_axis() -> None:
    text = stage_bar(scale_down("sd-1", 0.0), width=20, unicode=False)
    lines = text.splitlines()
    assert lines[0] == "dp_scale_down sd-1 succeeded: 1.00 s from the first fault observation to publication"
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == ["detection", "decision", "guard", "apply_ready", "drain", "apply", "rebuild", "commit",
                          "publish"]
    bar = {name: row[row.index("|") + 1:row.rindex("|")] for name, row in rows.items()}
    assert all(len(b) == 20 for b in bar.values())
    # The rebuild (0.1 s → 0.9 s of 1 s) covers cells 2..18; a 10 ms stage still gets one cell.
    assert bar["rebuild"] == "  " + "#" * 16 + "  "
    assert bar["guard"].count("#") == 1
    assert rows["rebuild"].endswith("800.0 ms") and lines[-1] == "  longest: rebuild (80% of the time drawn)"
    assert "█" in stage_bar(scale_down("sd-1", 0.0))


def test_a_transaction_without_a_stage_model() -> None:
    txn = controller_pb2.Transaction(request_id="fr-1", strategy="fast_recovery", outcome="failed: engine said no")
    assert stage_bar(txn) == "fast_recovery fr-1 failed: no stages to draw"
    assert duration_text(0.0016) == "1.6 ms" and duration_text(2.5) == "2.50 s"


def test_follow_prints_each_finished_transaction_once_with_its_stage_bar() -> None:
    channel = grpc_testing.channel([CONTROLLER], grpc_testing.strict_real_time())
    out = io.StringIO()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run(["timeline", "7", "--follow", "--count", "1"], out=out,
                                                                channel_factory=lambda _: channel)), daemon=True)
    thread.start()
    _, request, rpc = channel.take_unary_unary(CONTROLLER.methods_by_name["GetTimeline"])
    assert request.instance_id == 7
    earlier = scale_down("sd-earlier", 0.0)
    rpc.terminate(controller_pb2.GetTimelineResponse(transactions=[earlier]), (), grpc.StatusCode.OK, "")
    _, watch_request, stream = channel.take_unary_stream(CONTROLLER.methods_by_name["WatchFaultToleranceStatus"])
    assert list(watch_request.instance_ids) == [7]
    # A change while the next round runs: nothing new has finished.
    stream.send_response(controller_pb2.WatchFaultToleranceStatusResponse())
    _, _, rpc = channel.take_unary_unary(CONTROLLER.methods_by_name["GetTimeline"])
    rpc.terminate(controller_pb2.GetTimelineResponse(transactions=[earlier, scale_down("sd-next", 10.0, ended=False)]),
                  (), grpc.StatusCode.OK, "")
    # The round ended: printed once, and --count 1 ends the command.
    stream.send_response(controller_pb2.WatchFaultToleranceStatusResponse())
    _, _, rpc = channel.take_unary_unary(CONTROLLER.methods_by_name["GetTimeline"])
    rpc.terminate(controller_pb2.GetTimelineResponse(transactions=[earlier, scale_down("sd-next", 10.0)]), (),
                  grpc.StatusCode.OK, "")
    thread.join(10)
    stream.terminate((), grpc.StatusCode.OK, "")
    text = out.getvalue()
    assert result == [0]
    assert text.splitlines()[0] == "instance 7: following (1 earlier transactions not shown; motorctl timeline 7 lists them)"
    assert "sd-earlier" not in text and text.count("request_id=sd-next succeeded") == 1
    assert "dp_scale_down sd-next succeeded: 1.00 s from the first fault observation to publication" in text
    assert "rebuild" in text and "longest: rebuild" in text
