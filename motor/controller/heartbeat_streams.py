"""The open HeartbeatStreams of a Controller replica, so that a stopping replica ends them instead of
leaving them to the server's grace period: a stream never ends by itself, and each NodeManager sends
its next heartbeat as a call, which finds the next leader.

A status can be sent from outside a stream's handler only while the handler waits for its next
message. While an answer is being sent, grpc refuses a second send operation on the call
(GRPC_CALL_ERROR_TOO_MANY_OPERATIONS): that status would be lost and the stream would stay open until
the grace ran out. So a stream that is answering when the replica stops ends itself once its answer
is sent."""

from __future__ import annotations

import grpc


class HeartbeatStreams:
    def __init__(self) -> None:
        # Each open stream's context: True while its handler waits for the next message.
        self._waiting: dict[grpc.aio.ServicerContext, bool] = {}
        self._ending: str | None = None

    async def opened(self, context: grpc.aio.ServicerContext) -> None:
        """A new stream: refused at once when this replica is already stopping."""
        if self._ending is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"HeartbeatStream: {self._ending}")
        self._waiting[context] = True

    def received(self, context: grpc.aio.ServicerContext) -> bool:
        """A message arrived: the stream answers it, unless it was ended as the message came in."""
        if context not in self._waiting:
            return False
        self._waiting[context] = False
        return True

    async def answered(self, context: grpc.aio.ServicerContext) -> None:
        """The answer is sent: the stream ends here if the replica is stopping, else waits again."""
        if self._ending is not None:
            self._waiting.pop(context, None)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"HeartbeatStream: {self._ending}")
        self._waiting[context] = True

    def closed(self, context: grpc.aio.ServicerContext) -> None:
        self._waiting.pop(context, None)

    async def end_all(self, why: str) -> int:
        """Ends every open stream UNAVAILABLE naming `why`: those waiting now, those answering once
        their answer is sent. Returns how many were open."""
        self._ending = why
        opened = len(self._waiting)
        for context in list(self._waiting):
            if not self._waiting.get(context, False):
                continue  # answering, or closed meanwhile
            del self._waiting[context]
            try:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"HeartbeatStream: {why}")
            except Exception:  # noqa: BLE001 - abort raises in its caller once the status is sent; a finished call refuses it
                pass
        return opened
