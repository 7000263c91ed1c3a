"""Process entry shared by the services: arguments, config, logging, signals, ready file.

A service is an object with `async start() -> dict` (what it bound, e.g. {"grpc_port": 50051}) and
`async stop()`. `run_service` starts it on the event loop of ``--event-loop`` (asyncio's, uvloop's,
or auto: uvloop's where the package is installed, the Coordinator's default), writes the ready file, waits for SIGTERM/SIGINT and stops it gracefully. A refused configuration prints one line and exits with status 2 before anything
starts.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from motor.common.config.loader import ConfigError, load_config, parse_override
from motor.common.profiling import install_profile_toggle

log = logging.getLogger(__name__)

EXIT_CONFIG_ERROR = 2
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s [%(process)d] %(message)s"
EVENT_LOOPS = ("auto", "asyncio", "uvloop")


class Service(Protocol):
    async def start(self) -> dict[str, Any]: ...

    async def stop(self) -> None: ...


M = TypeVar("M", bound=BaseModel)


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S", stream=sys.stderr)


def base_arg_parser(prog: str, description: str, default_event_loop: str = "asyncio") -> argparse.ArgumentParser:
    """`default_event_loop`: the service's own default of --event-loop (MOTOR_EVENT_LOOP overrides it)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", type=Path, help="YAML or JSON config file")
    parser.add_argument("--host", help="gRPC bind address (overrides server.host)")
    parser.add_argument("--port", type=int, help="gRPC port, 0 for a free one (overrides server.port)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key by dotted path, e.g. fault_tolerance_config.enable_dp_scale_down=true",
    )
    parser.add_argument("--mode", choices=("test", "production"),
                        help="production refuses plaintext, fault injection and test delays (overrides mode)")
    parser.add_argument("--ready-file", type=Path, help="write JSON {ports, pid} here once serving")
    parser.add_argument("--log-level", default=os.environ.get("MOTOR_LOG_LEVEL", "INFO"))
    parser.add_argument("--event-loop", choices=EVENT_LOOPS,
                        default=os.environ.get("MOTOR_EVENT_LOOP", default_event_loop),
                        help="asyncio's own loop, uvloop's (libuv: a leaner hot path; needs the uvloop package), or "
                             f"auto: uvloop's where installed, else asyncio's (default {default_event_loop}; "
                             "MOTOR_EVENT_LOOP sets it too)")
    return parser


def resolve_event_loop(event_loop: str) -> str:
    """auto → uvloop when the package is importable, else asyncio; the others as they are."""
    if event_loop not in EVENT_LOOPS:
        raise ValueError(f"event loop {event_loop!r}: expected one of {', '.join(EVENT_LOOPS)}")
    if event_loop == "auto":
        return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    return event_loop


def run_loop(coro, event_loop: str = "asyncio"):
    """asyncio.run(coro) on the chosen event loop implementation (auto: see resolve_event_loop)."""
    if resolve_event_loop(event_loop) == "uvloop":
        import uvloop  # only when asked for: the other services never import it

        return uvloop.run(coro)
    return asyncio.run(coro)


def config_from_args(model: type[M], args: argparse.Namespace, extra: Sequence[tuple[str, Any]] = ()) -> M:
    overrides: list[tuple[str, Any]] = []
    if args.host is not None:
        overrides.append(("server.host", args.host))
    if args.port is not None:
        overrides.append(("server.port", args.port))
    if getattr(args, "mode", None) is not None:
        overrides.append(("mode", args.mode))
    overrides.extend(extra)
    overrides.extend(parse_override(item) for item in args.overrides)
    return load_config(model, args.config, overrides)


def write_ready_file(path: Path, info: dict[str, Any]) -> None:
    """Atomic, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**info, "pid": os.getpid()}))
    os.replace(tmp, path)


async def _serve(service: Service, ready_file: Path | None, label: str) -> None:
    stop_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_event.set)
    try:
        info = await service.start()
        if ready_file is not None:
            write_ready_file(ready_file, info)
        log.info("%s ready %s", label, json.dumps(info))
        await stop_event.wait()
        log.info("%s stopping on signal", label)
    finally:
        await service.stop()


def run_service(
    label: str,
    build: Callable[[argparse.Namespace], Service],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
) -> int:
    """Parses argv, builds the service (config errors → one line, exit 2), serves until signalled."""
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        service = build(args)
    except ConfigError as exc:
        print(f"{label}: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    event_loop = resolve_event_loop(getattr(args, "event_loop", "asyncio"))
    log.info("%s runs on the %s event loop", label, event_loop)
    install_profile_toggle(label)
    try:
        run_loop(_serve(service, args.ready_file, label), event_loop)
    except OSError as exc:
        log.error("%s failed to start: %s", label, exc)
        return 1
    return 0
