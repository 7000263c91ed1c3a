"""The NodeManager's heartbeats as messages of one HeartbeatStream call to the Controller leader.

A unary Heartbeat each period costs the leader several times the CPU of one message on an open
stream (docs/benchmarks.md), and at fleet size the heartbeats are most of what one leader does. The
stream goes to the replica the leader-following client believes leads; each heartbeat is one
message, and its answer is awaited within the client's deadline. Whatever else happens closes the
stream and sends that heartbeat as a unary call, which follows the leader as every call does:

- a standby's UNAVAILABLE naming the leader, a broken connection, a stream that ended;
- no answer in time: the replica is left out for a moment, as the unary calls do, so the fallback
  goes to another replica (with one replica there is nothing to fall back to: the heartbeat fails);
- UNIMPLEMENTED (a Controller from before the stream): that replica is sent unary heartbeats for
  `_NO_STREAM_SEC`, then asked again (it may have been upgraded).

The next heartbeat opens a stream to wherever the last call went. A stream is reopened after
`STREAM_LIFETIME_SEC` (its deadline, a little longer, is under the Controller's bound), when the
leader changes and when rotated certificate files reopened the channel. An exchange interrupted in
any way closes the stream, so an answer is never taken for a later heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from gen.motor.v1 import controller_pb2
from motor.common.leader_client import LeaderFollowingClient

log = logging.getLogger(__name__)

# How long one stream serves before it is reopened; its deadline adds a minute of slack.
STREAM_LIFETIME_SEC = 600.0
_DEADLINE_SLACK_SEC = 60.0
# How long a replica that has no HeartbeatStream is sent unary heartbeats before it is asked again.
_NO_STREAM_SEC = 300.0


class HeartbeatStream:
    def __init__(self, leader: LeaderFollowingClient, label: str = "nodemanager heartbeat stream") -> None:
        self._leader = leader
        self._label = label
        self._call: grpc.aio.StreamStreamCall | None = None
        self._address = ""
        self._stub: object = None
        self._opened_at = 0.0
        self._no_stream_until: dict[str, float] = {}
        # One exchange at a time: the answers come in the order of the requests.
        self._lock = asyncio.Lock()
        self.streams_opened = 0
        self.unary_fallbacks = 0

    async def heartbeat(self, request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse:
        async with self._lock:
            response = await self._exchange(request)
        if response is not None:
            return response
        self.unary_fallbacks += 1
        return await self._leader.call("Heartbeat", request)

    async def _exchange(self, request: controller_pb2.HeartbeatRequest) -> controller_pb2.HeartbeatResponse | None:
        """The answer on the stream; None when the heartbeat is to go as a unary call."""
        address = self._leader.address
        if self._no_stream_until.get(address, 0.0) > time.monotonic():
            return None
        call = self._open(address)
        timeout_sec = self._leader.timeout_sec
        try:
            async with asyncio.timeout(timeout_sec):
                await call.write(controller_pb2.HeartbeatStreamRequest(heartbeat=request))
                answer = await call.read()
        except asyncio.CancelledError:
            self.close()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Not this task's cancellation: grpc raises CancelledError from a read of a call cancelled
            # under it (its channel closed for rotated certificates). The stream is gone, that is all.
            return None
        except TimeoutError:
            self.close()
            if self._leader.not_answering(address):
                return None
            raise TimeoutError(f"HeartbeatStream to {address}: no answer within {timeout_sec:g}s") from None
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            self.close()
            if isinstance(exc, grpc.aio.AioRpcError) and exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                log.info("%s: %s has no HeartbeatStream; unary heartbeats for %gs", self._label, address,
                         _NO_STREAM_SEC)
                self._no_stream_until[address] = time.monotonic() + _NO_STREAM_SEC
            return None
        if answer is grpc.aio.EOF:
            self.close()
            return None
        self._leader.answered(address, answer.leader_term)
        return answer.heartbeat

    def _open(self, address: str) -> grpc.aio.StreamStreamCall:
        stub = self._leader.stub(address)
        if self._call is not None and (address != self._address or stub is not self._stub
                                       or time.monotonic() - self._opened_at >= STREAM_LIFETIME_SEC):
            self.close()
        if self._call is None:
            self._call = stub.HeartbeatStream(timeout=STREAM_LIFETIME_SEC + _DEADLINE_SLACK_SEC)
            self._address, self._stub, self._opened_at = address, stub, time.monotonic()
            self.streams_opened += 1
        return self._call

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
