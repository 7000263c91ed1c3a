"""PodStopRecord: a StopPod this pod obeyed, kept in the pod so that a restarted NodeManager stays stopped.

The Controller sends StopPod (with ``enable_dp_scale_up``) once every rank of the pod is committed
dead. The NodeManager stops its engines and exits with status 0, as the orchestrator's contract
says; the shipped StatefulSet then restarts the container in place. Without a record the new
process would relaunch the committed ranks with an empty retired set, break the heartbeat's exact
set and make the Controller reconfigure the instance. So, decided:

* before it exits, StopPod writes ``pod-stopped.json`` (instance, ranks, request id, reason, time)
  into the NodeManager's ``log_dir``, atomically (a temporary file renamed). The shipped manifests
  mount ``log_dir`` from an emptyDir of the pod: it survives a container restart and goes with the
  pod, so a recreated pod (capacity restoration) starts afresh;
* a NodeManager that starts and finds the record retires those ranks before anything runs: it
  launches none of them, registers with them in ``retired_ids`` (the contract's place for a stopped
  pod: the Controller sees ranks it committed, not an interrupted round), heartbeats none of them
  alive, DescribePod shows them retired and not running, and its log says why;
* a StartEngines or RelaunchEngines that launches ranks again (a reconfiguration, a scale-up)
  takes them out of the record, and the record goes once none is left;
* a record of another instance, or naming ranks this pod does not host, or unreadable, is logged
  and ignored (the pod starts as without one). Without ``log_dir`` every start gets a fresh
  temporary directory: nothing survives, as for the engines' logs.

Where the record is kept is a `StopStorage` (the file in ``log_dir`` in production); the clock stamps
the stop.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from motor.common.text_file import TextFile

log = logging.getLogger("nodemanager.pod_stop")

FILE_NAME = "pod-stopped.json"


@dataclass(frozen=True)
class PodStop:
    instance_id: int
    ranks: tuple[int, ...]
    request_id: str
    reason: str
    stopped_at_unix_sec: float


class StopStorage(Protocol):
    """Where the record is kept; it must outlive the NodeManager's process, not the pod."""

    @property
    def where(self) -> str:
        """Named in logs."""

    def read(self) -> str | None:
        """The record's text, None when there is none; OSError when it cannot be read."""

    def write(self, text: str) -> None:
        """Replaces the record atomically (a reader sees the old text or the new one)."""

    def remove(self) -> None: ...


class FileStopStorage(TextFile):
    """``pod-stopped.json`` in a directory (the NodeManager's log_dir)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, FILE_NAME)


def stop_target_mismatch(instance_id: int, pod_ip: str, my_instance_id: int, my_pod_ip: str) -> str | None:
    """Why a StopPod naming (`instance_id`, `pod_ip`) is not for this pod, None when it is. A stop
    that names no pod is refused too: a stop is only obeyed when it names this one."""
    if instance_id != my_instance_id:
        return f"names instance {instance_id}; this pod is instance {my_instance_id}'s"
    if pod_ip != my_pod_ip:
        return f"names pod {pod_ip or '(none)'}; this pod is {my_pod_ip}"
    return None


class PodStopRecord:
    def __init__(self, storage: StopStorage, *, instance_id: int, local_ids: Iterable[int],
                 wall: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self._wall = wall
        self._instance = instance_id
        self._local = frozenset(local_ids)
        # The ranks the record holds as far as this run knows (what was loaded or written last).
        self.stopped: tuple[int, ...] = ()

    def load(self) -> PodStop | None:
        """The stop recorded by an earlier run of this pod's NodeManager, if any (and valid)."""
        try:
            text = self.storage.read()
            if text is None:
                return None
            data = json.loads(text)
            stop = PodStop(int(data["instance_id"]), tuple(sorted(int(r) for r in data["ranks"])),
                           str(data["request_id"]), str(data["reason"]), float(data["stopped_at_unix_sec"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("instance=%d stop record %s unreadable, ignored: %s", self._instance, self.storage.where, exc)
            return None
        if stop.instance_id != self._instance or not stop.ranks or not set(stop.ranks) <= self._local:
            log.error("instance=%d stop record %s is not this pod's (instance %d, ranks %s; local ranks %s), "
                      "ignored", self._instance, self.storage.where, stop.instance_id, list(stop.ranks),
                      sorted(self._local))
            return None
        self.stopped = stop.ranks
        return stop

    def save(self, ranks: Iterable[int], request_id: str, reason: str) -> None:
        stop = PodStop(self._instance, tuple(sorted(set(ranks))), request_id, reason, self._wall())
        self.storage.write(json.dumps(asdict(stop), sort_keys=True))
        self.stopped = stop.ranks
        log.info("instance=%d request_id=%s stop of ranks %s recorded in %s", self._instance, request_id or "-",
                 list(stop.ranks), self.storage.where)

    def release(self, ranks: Iterable[int]) -> None:
        """`ranks` run again: they are no longer stopped (the record goes once none is left)."""
        stop = self.load()
        if stop is None:
            return
        left = sorted(set(stop.ranks) - set(ranks))
        if left == list(stop.ranks):
            return
        if left:
            self.save(left, stop.request_id, stop.reason)
        else:
            self.storage.remove()
            self.stopped = ()
        log.info("instance=%d stop record of %s: ranks %s launched again, %s still stopped", self._instance,
                 stop.request_id or "-", sorted(set(stop.ranks) - set(left)), left)
