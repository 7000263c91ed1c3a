"""motorctl restore INSTANCE [--when-ready] [--deadline S] [--request-id ID]: capacity restoration.

Asks the Controller to bring the instance back to every original rank (RestoreInstance), then asks
again with the same request id (idempotent: never a second restoration) until the request ends:
restored, failed, expired (with --when-ready, not ready within --deadline) or full (nothing to
restore). Without --when-ready an instance whose retired ranks have no ready place is refused at
once, naming them. Exit status 0 only when the instance is restored (or was full).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import TextIO

import grpc

from gen.motor.v1 import controller_pb2, controller_pb2_grpc

RPC_TIMEOUT_SEC = 10.0
POLL_SEC = 0.5
_ENDED = ("restored", "expired", "full")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="bring a scaled-down instance back to every original rank")
    p.add_argument("instance_id", type=int)
    p.add_argument("--when-ready", action="store_true",
                   help="wait (pending) until every retired rank has a ready place, instead of being refused")
    p.add_argument("--deadline", type=float, default=600.0,
                   help="seconds to wait for the restoration to end (with --when-ready also for the places; "
                        "default 600)")
    p.add_argument("--request-id", default="", help="the request's id (default: a fresh one); the same id again "
                                                    "follows the same request")


def run(args: argparse.Namespace, channel_factory: Callable[[str], grpc.Channel], out: TextIO) -> int:
    request = controller_pb2.RestoreInstanceRequest(
        instance_id=args.instance_id, request_id=args.request_id or f"motorctl-restore-{uuid.uuid4().hex[:12]}",
        when_ready=args.when_ready, deadline_sec=args.deadline if args.when_ready else 0.0)
    give_up = time.monotonic() + args.deadline
    last = ""
    with channel_factory(args.controller) as ch:
        stub = controller_pb2_grpc.ControllerStub(ch)
        while True:
            resp = stub.RestoreInstance(request, timeout=RPC_TIMEOUT_SEC)
            line = f"instance {args.instance_id} {resp.state}"
            if resp.transaction_id:
                line += f" (transaction {resp.transaction_id})"
            if resp.message:
                line += f": {resp.message}"
            if line != last:
                print(line, file=out, flush=True)
                last = line
            ended = resp.state in _ENDED or resp.state.startswith("failed")
            if ended:
                return 0 if resp.state in ("restored", "full") else 1
            if time.monotonic() >= give_up:
                print(f"instance {args.instance_id}: still {resp.state} after {args.deadline:g}s "
                      f"(request {request.request_id})", file=out)
                return 1
            time.sleep(POLL_SEC)
