"""Ending a stopping replica's HeartbeatStreams: a stream waiting for its next message gets its
status at once; a stream sending an answer is never sent a status from outside (grpc refuses a
second send on the call and the status would be lost) and ends itself once the answer is sent; a
message that arrives as its stream is ended is not answered; a stream opened after the stop is
refused."""

from __future__ import annotations

import pytest

from motor.controller.heartbeat_streams import HeartbeatStreams

WHY = "controller r1 is stopping"


class Aborted(Exception):
    """What grpc's abort raises in its caller once the status is sent."""


class Call:
    """A server call as grpc keeps it: one send at a time, one status."""

    def __init__(self) -> None:
        self.sending = False
        self.status: tuple[str, str] | None = None

    async def abort(self, code, details: str) -> None:
        if self.sending or self.status is not None:
            raise RuntimeError("GRPC_CALL_ERROR_TOO_MANY_OPERATIONS: the status is lost")
        self.status = (code.name, details)
        raise Aborted()


async def test_a_waiting_stream_is_ended_at_once_naming_why() -> None:
    streams, call = HeartbeatStreams(), Call()
    await streams.opened(call)  # type: ignore[arg-type]
    assert await streams.end_all(WHY) == 1
    assert call.status == ("UNAVAILABLE", f"HeartbeatStream: {WHY}")


async def test_a_stream_sending_its_answer_ends_itself_once_the_answer_is_sent() -> None:
    streams, call = HeartbeatStreams(), Call()
    await streams.opened(call)  # type: ignore[arg-type]
    assert streams.received(call)  # type: ignore[arg-type]
    call.sending = True
    assert await streams.end_all(WHY) == 1
    assert call.status is None, "no status from outside while the answer is on its way"
    call.sending = False
    with pytest.raises(Aborted):
        await streams.answered(call)  # type: ignore[arg-type]
    assert call.status == ("UNAVAILABLE", f"HeartbeatStream: {WHY}")


async def test_a_stream_answered_before_the_stop_waits_again_and_is_ended_then() -> None:
    streams, call = HeartbeatStreams(), Call()
    await streams.opened(call)  # type: ignore[arg-type]
    assert streams.received(call)  # type: ignore[arg-type]
    await streams.answered(call)  # type: ignore[arg-type]
    assert call.status is None
    assert await streams.end_all(WHY) == 1
    assert call.status == ("UNAVAILABLE", f"HeartbeatStream: {WHY}")


async def test_a_message_arriving_as_its_stream_is_ended_is_not_answered() -> None:
    streams, call = HeartbeatStreams(), Call()
    await streams.opened(call)  # type: ignore[arg-type]
    await streams.end_all(WHY)
    assert not streams.received(call)  # type: ignore[arg-type]


async def test_a_stream_opened_after_the_stop_is_refused_and_closed_streams_are_not_counted() -> None:
    streams, gone, late = HeartbeatStreams(), Call(), Call()
    await streams.opened(gone)  # type: ignore[arg-type]
    streams.closed(gone)  # type: ignore[arg-type]
    assert await streams.end_all(WHY) == 0
    assert gone.status is None
    with pytest.raises(Aborted):
        await streams.opened(late)  # type: ignore[arg-type]
    assert late.status == ("UNAVAILABLE", f"HeartbeatStream: {WHY}")
