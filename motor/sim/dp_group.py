"""The DP communication domain: a TCPStore plus a torch gloo process group (executor side only).

Formed like vLLM's ``stateless_init_dp_group``: the store is created here (the group's lowest
member is the store server), wrapped in a PrefixStore namespaced by the group's tag (``init`` or
the apply's request_id), and a ``ProcessGroupGloo`` is constructed directly, never as the global
default group, so it can be shut down and rebuilt any number of times in one process.

The store server binds exactly ``ip:port`` (a pre-bound listening socket is handed to TCPStore):
TCPStore on its own listens on every interface, which would make two emulated pods on
127.0.0.2 and 127.0.0.3 collide on one port.

Imports torch: only the executor process imports this module.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")  # c10d prints C++ stack traces for every retry
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
from torch.distributed import PrefixStore, TCPStore  # noqa: E402
from torch._C._distributed_c10d import AllreduceOptions, ProcessGroupGloo  # noqa: E402

log = logging.getLogger("motor.sim.dp_group")

_POLL_SEC = 0.05


class DpGroupError(RuntimeError):
    """Forming or using the DP group failed."""


class CollectiveError(DpGroupError):
    """A collective failed or timed out (a peer died, hung or tore its group down)."""


_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")


def clean_error(exc: BaseException) -> str:
    """First line of a c10d/gloo error without the C++ source location and the chatty tail."""
    text = str(exc).strip().split("\n", 1)[0] or type(exc).__name__
    text = _SOURCE_PREFIX.sub("", text)
    return text.split(" This is typically caused", 1)[0]


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(0.001, seconds))


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


@dataclass
class StoreHandle:
    ip: str
    port: int
    is_server: bool
    store: TCPStore

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


def _bind_listener(ip: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def open_store(ip: str, port: int, *, is_server: bool, deadline: float, rank: int, tag: str,
               reach_by: float | None = None, bound: str = "before the deadline") -> StoreHandle:
    """Serve (lowest member) or connect to the DP store at ``ip:port``; the store's operations are
    bounded by ``deadline``, reaching it by ``reach_by`` (default: the deadline; ``bound`` names it)."""
    reach_by = deadline if reach_by is None else reach_by
    if is_server:
        try:
            sock = _bind_listener(ip, port)
        except OSError as exc:
            raise DpGroupError(f"cannot bind DP store at {ip}:{port}: {exc}") from None
        bound_port = sock.getsockname()[1]
        try:
            store = TCPStore(
                ip, bound_port, None, True, timeout=_td(_remaining(deadline)),
                wait_for_workers=False, master_listen_fd=sock.fileno(),
            )
        except Exception as exc:
            sock.close()
            raise DpGroupError(f"cannot start DP store server at {ip}:{bound_port}: {clean_error(exc)}") from None
        sock.detach()  # TCPStore owns the descriptor now
        log.info("rank=%d tag=%s serving DP store at %s:%d", rank, tag, ip, bound_port)
        return StoreHandle(ip, bound_port, True, store)
    # Wait for the listener ourselves: TCPStore's own connect retry backs off for seconds.
    last_error: Exception | None = None
    attempts = 0
    while _remaining(reach_by) > 0 and attempts < 1_000_000:
        attempts += 1
        try:
            with socket.create_connection((ip, port), timeout=min(1.0, max(0.05, _remaining(reach_by)))):
                break
        except OSError as exc:
            last_error = exc
            time.sleep(min(_POLL_SEC, max(0.0, _remaining(reach_by))))
    else:
        raise DpGroupError(f"DP store at {ip}:{port} not reachable {bound}: {last_error}")
    try:
        store = TCPStore(ip, port, None, False, timeout=_td(_remaining(deadline)))
    except Exception as exc:
        raise DpGroupError(f"cannot connect to DP store at {ip}:{port}: {clean_error(exc)}") from None
    log.info("rank=%d tag=%s connected to DP store at %s:%d", rank, tag, ip, port)
    return StoreHandle(ip, port, False, store)


def _store_usable(store: StoreHandle) -> bool:
    try:
        store.store.check(["motor/ping"])
    except Exception:
        return False
    return True


class DpGroup:
    """One generation of the DP group: members are original ranks, dense rank = index."""

    def __init__(
        self, *, tag: str, generation: int, members: Sequence[int], rank: int,
        store: StoreHandle, prefix_store: PrefixStore, pg: ProcessGroupGloo,
    ) -> None:
        self.tag = tag
        self.generation = generation
        self.members = tuple(members)
        self.rank = rank
        self.dense_rank = self.members.index(rank)
        self.store = store
        self._prefix_store = prefix_store
        self._pg: ProcessGroupGloo | None = pg

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def alive(self) -> bool:
        return self._pg is not None

    def describe(self) -> dict[str, object]:
        return {
            "tag": self.tag,
            "generation": self.generation,
            "members": list(self.members),
            "size": self.size,
            "dense_rank": self.dense_rank,
            "master": {"ip": self.store.ip, "port": self.store.port},
            "is_store_server": self.store.is_server,
        }

    def allreduce_sum(self, value: int, timeout_sec: float) -> int:
        return self.allreduce_sums([value], timeout_sec)[0]

    def allreduce_sums(self, values: Sequence[int], timeout_sec: float) -> list[int]:
        """Element-wise sums over the members, in one collective."""
        if self._pg is None:
            raise CollectiveError("DP group is shut down")
        tensor = torch.tensor(list(values), dtype=torch.int64)
        opts = AllreduceOptions()
        opts.timeout = _td(timeout_sec)
        try:
            self._pg.allreduce([tensor], opts).wait()
        except Exception as exc:
            raise CollectiveError(clean_error(exc)) from None
        return [int(v) for v in tensor.tolist()]

    def shutdown(self) -> None:
        """Close the group's sockets so peers blocked in a collective fail at once."""
        pg, self._pg = self._pg, None
        if pg is None:
            return
        try:
            pg.shutdown()
        except Exception as exc:  # a broken group may refuse a clean shutdown; dropping it still closes sockets
            log.debug("rank=%d tag=%s gloo shutdown raised: %s", self.rank, self.tag, exc)
        del pg

    # Wave signalling through the store: key "wave/<n>" exists once some member started wave n.
    def wave_started(self, wave: int) -> bool:
        return bool(self._prefix_store.check([f"wave/{wave}"]))

    def start_wave(self, wave: int) -> None:
        self._prefix_store.add(f"wave/{wave}", 1)

    def forget_wave(self, wave: int) -> None:
        try:
            self._prefix_store.delete_key(f"wave/{wave}")
        except Exception as exc:  # only housekeeping
            log.debug("rank=%d tag=%s could not delete wave/%d: %s", self.rank, self.tag, wave, exc)

    def probe_missing(self, wave: int, window_sec: float,
                      interrupted: Callable[[], bool] = lambda: False) -> list[int] | None:
        """After a failed collective: original ranks that did not report in, or None if unknown
        (store unreachable, or ``interrupted()`` -- e.g. an apply is waiting -- cut the window short)."""
        deadline = time.monotonic() + window_sec
        keys = {d: f"probe/{wave}/{d}" for d in range(self.size)}
        try:
            self._prefix_store.set(keys[self.dense_rank], str(self.rank))
            missing = set(keys) - {self.dense_rank}
            polls = 0
            while missing and polls < 10_000:
                polls += 1
                missing = {d for d in missing if not self._prefix_store.check([keys[d]])}
                if not missing or _remaining(deadline) <= 0:
                    break
                if interrupted():
                    return None
                time.sleep(_POLL_SEC)
        except Exception as exc:
            log.info("rank=%d tag=%s wave=%d fault probe impossible (store unreachable): %s",
                     self.rank, self.tag, wave, clean_error(exc))
            return None
        return sorted(self.members[d] for d in missing)


def form_group(
    *,
    tag: str,
    generation: int,
    members: Sequence[int],
    rank: int,
    master_ip: str,
    master_port: int,
    gloo_host: str,
    deadline: float,
    reuse_store: StoreHandle | None = None,
    checkin_sec: float | None = None,
) -> DpGroup:
    """Form the group ``members`` (sorted original ranks) or raise DpGroupError by ``deadline``.

    ``checkin_sec``: every member must reach the store and check in (its join key under the
    group's tag, i.e. the round's request_id) within this window from now, else the round fails.
    """
    members = tuple(sorted(members))
    dense = members.index(rank)
    checkin_deadline, bound = deadline, "before the deadline"
    if checkin_sec is not None and time.monotonic() + checkin_sec < deadline:
        checkin_deadline, bound = time.monotonic() + checkin_sec, f"within the {checkin_sec:g}s check-in window"

    def connect(is_server: bool) -> StoreHandle:
        return open_store(master_ip, master_port, is_server=is_server, deadline=deadline, rank=rank, tag=tag,
                          reach_by=checkin_deadline, bound=bound)

    if reuse_store is not None and (reuse_store.ip, reuse_store.port) == (master_ip, master_port):
        store = reuse_store
        if not store.is_server and not _store_usable(store):
            # Our old connection broke (the server may still be fine): connect afresh.
            store = connect(False)
        log.info("rank=%d tag=%s reusing DP store %s", rank, tag, store.address)
    else:
        store = connect(dense == 0)
    prefix_store = PrefixStore(f"motor/{tag}/", store.store)
    # Explicit join barrier: on timeout it names the ranks that never came (gloo would not).
    try:
        prefix_store.set(f"join/{dense}", str(rank))
        missing = set(range(len(members))) - {dense}
        polls = 0
        while missing and polls < 10_000_000:
            polls += 1
            missing = {d for d in missing if not prefix_store.check([f"join/{d}"])}
            if not missing:
                break
            if _remaining(checkin_deadline) <= 0:
                raise DpGroupError(
                    f"dp ranks {sorted(members[d] for d in missing)} did not join DP group "
                    f"{tag!r} (members {list(members)}) {bound}"
                )
            time.sleep(_POLL_SEC)
        opts = ProcessGroupGloo._Options()
        opts._timeout = _td(_remaining(deadline))
        opts._devices = [
            ProcessGroupGloo.create_device(hostname=gloo_host) if gloo_host else ProcessGroupGloo.create_default_device()
        ]
        pg = ProcessGroupGloo(prefix_store, dense, len(members), opts)
    except DpGroupError:
        raise
    except Exception as exc:
        raise DpGroupError(f"forming DP group {tag!r} (members {list(members)}) failed: {clean_error(exc)}") from None
    group = DpGroup(tag=tag, generation=generation, members=members, rank=rank, store=store,
                    prefix_store=prefix_store, pg=pg)
    try:
        total = group.allreduce_sum(1, max(0.001, _remaining(deadline)))
    except CollectiveError as exc:
        group.shutdown()
        raise DpGroupError(f"first collective of DP group {tag!r} failed: {exc}") from None
    if total != len(members):
        group.shutdown()
        raise DpGroupError(f"DP group {tag!r} sanity all-reduce returned {total}, expected {len(members)}")
    return group
