"""Probes of a Controller under load, from a thread of their own (one event loop): heartbeats as a pod
sends them, the JSON status pages, gRPC GetFaultToleranceStatus, and WatchFaultToleranceStatus.

Watch is probed two ways. Long-lived watchers of every instance record how late each change reaches
them (arrival minus the change's `changed_at_unix_sec`, both this machine's wall clock) and what each
last saw of every instance, so a benchmark can check that every watcher ends on every instance's last
state (a slow watcher may lose intermediate states, never the last). A Watch opened anew every
interval measures how long its first snapshot of every instance takes to arrive.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import grpc

from benchmarks.timing import distribution
from gen.motor.v1 import controller_pb2, controller_pb2_grpc
from motor.launch.spec import ClusterSpec

# How long a Watch opened anew may take to deliver its snapshot before the probe counts it failed.
WATCH_SNAPSHOT_TIMEOUT_SEC = 30.0


@dataclass(frozen=True)
class WatchedView:
    """What a watcher last saw of one instance."""

    serving_published: bool
    alive_dp_ranks: tuple[int, ...]


class Probes:
    def __init__(self, controller_address: str, controller_http: str, spec: ClusterSpec, heartbeat_hz: float = 5.0,
                 status_interval_sec: float = 1.0, *, status: bool = True, watchers: int = 2,
                 watch_snapshots: bool = True) -> None:
        """`heartbeat_hz` 0: no heartbeat probe; `status` False: no page or GetFaultToleranceStatus
        probes; `watchers` long-lived Watch streams of every instance; `watch_snapshots` a Watch opened
        anew every `status_interval_sec`."""
        self.controller_address = controller_address
        self.controller_http = controller_http
        self.spec = spec
        self.heartbeat_hz = heartbeat_hz
        self.status_interval_sec = status_interval_sec
        self.status = status
        self.watchers = watchers
        self.watch_snapshots = watch_snapshots
        self.heartbeat_ms: list[float] = []
        self.heartbeat_errors = 0
        self.status_all_ms: list[float] = []
        self.status_one_ms: list[float] = []
        self.status_grpc_ms: list[float] = []
        self.status_all_bytes = 0
        self.watch_lag_ms: list[float] = []
        self.watch_messages = 0
        self.watch_bytes = 0
        self.watch_errors = 0
        self.watch_snapshot_ms: list[float] = []
        self.watch_snapshot_bytes = 0
        self._views: list[dict[int, WatchedView]] = [{} for _ in range(watchers)]
        self._views_lock = threading.Lock()
        # Set once every long-lived watcher has its first snapshot (at once when there are none).
        self._watchers_open = threading.Event()
        self._open = 0
        if not watchers:
            self._watchers_open.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probes", daemon=True)

    def start(self) -> Probes:
        self._thread.start()
        if not self._watchers_open.wait(WATCH_SNAPSHOT_TIMEOUT_SEC):
            self.stop()
            raise RuntimeError(f"{self.watchers} Watch streams did not deliver their first snapshot of "
                               f"{self.spec.instances} instances within {WATCH_SNAPSHOT_TIMEOUT_SEC:g} s")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def views(self) -> list[dict[int, WatchedView]]:
        """Each watcher's last view of every instance it saw."""
        with self._views_lock:
            return [dict(v) for v in self._views]

    def watchers_see(self, alive: dict[int, list[int]]) -> bool:
        """Every watcher last saw each of these instances serving on exactly these ranks."""
        want = {i: WatchedView(True, tuple(sorted(r))) for i, r in alive.items()}
        return all(all(v.get(i) == w for i, w in want.items()) for v in self.views())

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with grpc.aio.insecure_channel(self.controller_address) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            jobs = [self._watch(stub, n) for n in range(self.watchers)]
            if self.heartbeat_hz:
                jobs.append(self._heartbeats(stub))
            if self.status:
                jobs += [self._status_pages(), self._status_grpc(stub)]
            if self.watch_snapshots:
                jobs.append(self._watch_snapshots(stub))
            tasks = [asyncio.create_task(j) for j in jobs]
            await asyncio.to_thread(self._stop.wait)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _heartbeats(self, stub: controller_pb2_grpc.ControllerStub) -> None:
        spec = self.spec
        iid, pod = spec.instance_ids()[min(spec.instances, 3) - 1], min(spec.pods_per_instance - 1, 5)
        req = controller_pb2.HeartbeatRequest(pod_ip=spec.pod_ip(iid, pod), instance_id=iid,
                                              alive_endpoint_ids=spec.pod_ranks(pod), seq=1)
        while True:
            t = time.perf_counter()
            try:
                await stub.Heartbeat(req, timeout=10)
                self.heartbeat_ms.append(1000 * (time.perf_counter() - t))
            except grpc.aio.AioRpcError:
                self.heartbeat_errors += 1
            await asyncio.sleep(max(0.0, 1 / self.heartbeat_hz - (time.perf_counter() - t)))

    async def _status_pages(self) -> None:
        base = f"{self.controller_http}/controller/fault_tolerance/status"

        def get(url: str) -> int:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return len(resp.read())

        while True:
            t = time.perf_counter()
            self.status_all_bytes = await asyncio.to_thread(get, base)
            self.status_all_ms.append(1000 * (time.perf_counter() - t))
            t1 = time.perf_counter()
            await asyncio.to_thread(get, f"{base}?instance_id=1")
            self.status_one_ms.append(1000 * (time.perf_counter() - t1))
            await asyncio.sleep(max(0.0, self.status_interval_sec - (time.perf_counter() - t)))

    async def _status_grpc(self, stub: controller_pb2_grpc.ControllerStub) -> None:
        while True:
            t = time.perf_counter()
            await stub.GetFaultToleranceStatus(controller_pb2.GetFaultToleranceStatusRequest(), timeout=30)
            self.status_grpc_ms.append(1000 * (time.perf_counter() - t))
            await asyncio.sleep(max(0.0, self.status_interval_sec - (time.perf_counter() - t)))

    async def _watch(self, stub: controller_pb2_grpc.ControllerStub, n: int) -> None:
        """One long-lived watcher: its first snapshot (one message per instance) is not a change and
        is not timed; every later message is."""
        snapshot = self.spec.instances
        call = stub.WatchFaultToleranceStatus(controller_pb2.WatchFaultToleranceStatusRequest())
        try:
            async for change in call:
                arrived = time.time()
                rt = change.runtime
                with self._views_lock:
                    self._views[n][rt.instance_id] = WatchedView(rt.serving_published, tuple(sorted(rt.alive_dp_ranks)))
                if snapshot:
                    snapshot -= 1
                    if not snapshot:
                        self._open += 1
                        if self._open == self.watchers:
                            self._watchers_open.set()
                    continue
                self.watch_messages += 1
                self.watch_bytes += change.ByteSize()
                self.watch_lag_ms.append(1000 * (arrived - change.changed_at_unix_sec))
        except grpc.aio.AioRpcError:
            self.watch_errors += 1
        finally:
            call.cancel()

    async def _watch_snapshots(self, stub: controller_pb2_grpc.ControllerStub) -> None:
        while True:
            t = time.perf_counter()
            call = stub.WatchFaultToleranceStatus(controller_pb2.WatchFaultToleranceStatusRequest(),
                                                  timeout=WATCH_SNAPSHOT_TIMEOUT_SEC)
            got = size = 0
            try:
                async for change in call:
                    got, size = got + 1, size + change.ByteSize()
                    if got == self.spec.instances:
                        self.watch_snapshot_ms.append(1000 * (time.perf_counter() - t))
                        self.watch_snapshot_bytes = size
                        break
            except grpc.aio.AioRpcError:
                self.watch_errors += 1
            finally:
                call.cancel()
            await asyncio.sleep(max(0.0, self.status_interval_sec - (time.perf_counter() - t)))

    def summary(self) -> dict[str, Any]:
        dist = distribution
        return {"heartbeat": {**dist(self.heartbeat_ms), "errors": self.heartbeat_errors},
                "status_http_all": {**dist(self.status_all_ms), "bytes": self.status_all_bytes},
                "status_http_one": dist(self.status_one_ms), "status_grpc_all": dist(self.status_grpc_ms),
                "watch_snapshot": {**dist(self.watch_snapshot_ms), "bytes": self.watch_snapshot_bytes},
                "watch": {"watchers": self.watchers, "messages": self.watch_messages, "bytes": self.watch_bytes,
                          "errors": self.watch_errors, "lag": dist(self.watch_lag_ms)}}
