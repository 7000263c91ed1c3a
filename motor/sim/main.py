"""``motor-engine-sim``: one process per DP rank (API here, executor in a child process).

Start-up: parse flags (bad values: one line, exit 2) -> bind the HTTP port (not listening yet:
connections are refused until ready) -> start the executor (imports torch, loads the "model", forms
the initial DP group with every rank; with ``--join`` none) -> listen -> write ``--ready-file``
atomically. SIGTERM/SIGINT: stop HTTP, stop the executor, remove the ready file, exit 0.
Exit 1 when the engine cannot start (initial group, HTTP bind).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

from aiohttp import web

from motor.sim.config import SimConfig, parse_config
from motor.sim.engine import SimEngine, StartupError
from motor.sim.http_api import build_app
from motor.sim.instance_link import link_forever

log = logging.getLogger("motor.sim.main")

_HTTP_SHUTDOWN_SEC = 3.0


def bind_http_socket(host: str, port: int) -> socket.socket:
    """The API's socket, bound before the DP group forms and listened on only once the engine is
    ready. The group's gloo pairs and stores bind ephemeral ports on the same address while it
    forms, and the kernel may hand them the port the NodeManager chose for this API (it probed it
    free); holding it from the start closes that window, as vLLM's API server does."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def write_ready_file(path: str, doc: dict[str, object]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _remove_ready_file(path: str | None) -> None:
    if path is None:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove ready file %s: %s", path, exc)


async def _serve(cfg: SimConfig) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = SimEngine(cfg)
    runner: web.AppRunner | None = None
    try:
        http_sock = bind_http_socket(cfg.host, cfg.port)
    except OSError as exc:
        log.error("rank=%d cannot bind HTTP at %s:%d: %s", cfg.dp_rank, cfg.host, cfg.port, exc)
        return 1
    try:
        master = f"{cfg.dp_master_ip}:{cfg.dp_master_port}"
        if cfg.join:
            master = "none (--join: a scale_up round admits this rank)"
        log.info("rank=%d starting: dp_size=%d master=%s experts=%d+%d fault_tolerance=%s injection=%s",
                 cfg.dp_rank, cfg.dp_size, master, cfg.num_experts, cfg.num_redundant_experts,
                 cfg.enable_fault_tolerance, cfg.enable_fault_injection)
        start = asyncio.create_task(engine.start())
        stop_wait = asyncio.create_task(stop.wait())
        await asyncio.wait({start, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not start.done():
            log.info("rank=%d stopped during start-up", cfg.dp_rank)
            start.cancel()
            return 0
        stop_wait.cancel()
        try:
            start.result()
        except StartupError as exc:
            log.error("rank=%d cannot start: %s", cfg.dp_rank, exc)
            return 1
        runner = web.AppRunner(build_app(engine), access_log=None, shutdown_timeout=_HTTP_SHUTDOWN_SEC)
        await runner.setup()
        await web.SockSite(runner, http_sock).start()
        port = http_sock.getsockname()[1]
        if cfg.ready_file is not None:
            write_ready_file(cfg.ready_file, {
                "port": port, "pid": os.getpid(), "host": cfg.host, "dp_rank": cfg.dp_rank,
                "executor_pid": engine.executor_pid,
            })
        log.info("rank=%d serving on http://%s:%d (pid=%d)", cfg.dp_rank, cfg.host, port, os.getpid())
        if cfg.ft_manager_address is not None:
            link = asyncio.create_task(link_forever(cfg.ft_manager_address, cfg.dp_rank, cfg.host, port))
        await stop.wait()  # the service runs until SIGTERM/SIGINT
        log.info("rank=%d shutting down", cfg.dp_rank)
        if cfg.ft_manager_address is not None:
            link.cancel()
        return 0
    finally:
        _remove_ready_file(cfg.ready_file)
        await engine.stop()
        if runner is not None:
            await runner.cleanup()
        http_sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_config(argv)
    logging.basicConfig(
        level=getattr(logging, cfg.log_level),
        format="%(asctime)s %(levelname)s %(name)s[pid=%(process)d]: %(message)s",
    )
    return asyncio.run(_serve(cfg))


if __name__ == "__main__":
    sys.exit(main())
