"""Calls and message bytes a gRPC server handles, per method, as Prometheus counters.

`TrafficInterceptor` counts every unary call a server answers (`motor_grpc_server_calls_total`)
and the serialized size of its request and answer messages (`motor_grpc_server_received_bytes_total`,
`motor_grpc_server_sent_bytes_total`): what a round costs in calls and bytes on the wire, per kind
(protobuf payload only; HTTP/2 framing and TLS add a few dozen bytes a call). The label is the
method's short name (bounded by the services' definitions). The messages of a bidirectional
stream written as an async generator (HeartbeatStream) are counted one by one in
`motor_grpc_server_stream_messages_total` (by method and direction) and in the byte counters;
server streams (the Watch) pass through uncounted.
"""

from __future__ import annotations

import inspect

import grpc
from prometheus_client import CollectorRegistry, Counter


class TrafficInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("motor_grpc_server_calls_total", "Unary gRPC calls answered, by method", ["method"],
                             registry=registry)
        self.received = Counter("motor_grpc_server_received_bytes_total",
                                "Serialized request bytes of unary calls and stream messages, by method", ["method"], registry=registry)
        self.sent = Counter("motor_grpc_server_sent_bytes_total",
                            "Serialized answer bytes of unary calls and stream messages, by method", ["method"], registry=registry)
        self.stream_messages = Counter("motor_grpc_server_stream_messages_total",
                                       "Messages on bidirectional gRPC streams, by method and direction",
                                       ["method", "direction"], registry=registry)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        name = handler_call_details.method.rsplit("/", 1)[-1]
        if handler.stream_stream is not None and inspect.isasyncgenfunction(handler.stream_stream):
            return self._count_stream(name, handler)
        if handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        calls, received, sent = self.calls.labels(name), self.received.labels(name), self.sent.labels(name)

        async def unary_unary(request, context):
            calls.inc()
            received.inc(request.ByteSize())
            answer = await inner(request, context)
            if answer is not None:
                sent.inc(answer.ByteSize())
            return answer

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    def _count_stream(self, name: str, handler):
        inner = handler.stream_stream
        received, sent = self.received.labels(name), self.sent.labels(name)
        received_msgs = self.stream_messages.labels(name, "received")
        sent_msgs = self.stream_messages.labels(name, "sent")

        async def counted(requests):
            async for request in requests:
                received_msgs.inc()
                received.inc(request.ByteSize())
                yield request

        async def stream_stream(requests, context):
            async for answer in inner(counted(requests), context):
                sent_msgs.inc()
                sent.inc(answer.ByteSize())
                yield answer

        return grpc.stream_stream_rpc_method_handler(
            stream_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
