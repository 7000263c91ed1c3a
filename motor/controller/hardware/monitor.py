"""ResourceMonitor: Motor's listener for MindCluster hardware and node faults (RFC §4.4).

It is an adapter, not a MindCluster component: sources read what MindCluster publishes, turn it
into HardwareFaults, and hand new or changed ones to one callback (the FaultManager's intake).
Sources behind one protocol:

- RpcSource: what the Controller's ReportHardwareFault servicer calls (validate, then deliver).
- DirectoryConfigMapSource: device-info ConfigMaps mounted as files, polled.
- KubernetesConfigMapSource (kube.py): list+watch of the ConfigMaps and of Nodes (NotReady).

I/O happens only in the sources; parsing, de-duplication and mapping are pure modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gen.motor.v1 import controller_pb2
from motor.controller.hardware.dedup import FaultDeduper
from motor.controller.hardware.model import FaultKey, HardwareFault
from motor.controller.hardware.parser import (
    DEVICE_INFO_KEY,
    MANUALLY_SEPARATE_KEY,
    UPGRADE_REASON_KEY,
    node_from_configmap_name,
    parse_configmap,
)

if TYPE_CHECKING:
    from motor.common.config import HardwareMonitorConfig
    from motor.controller.hardware.kube import KubeApi

log = logging.getLogger(__name__)

FaultCallback = Callable[[list[HardwareFault]], Awaitable[None] | None]

# A ConfigMap holds at most 1 MiB; a bigger file is not one.
MAX_CONFIGMAP_BYTES = 1 << 20
# Bound of one directory scan (documents per poll).
MAX_DOCUMENTS = 4096
_KEY_FILES = (DEVICE_INFO_KEY, MANUALLY_SEPARATE_KEY, UPGRADE_REASON_KEY)
_FILE_SUFFIXES = (".json", ".yaml", ".yml")


class HardwareMonitorError(RuntimeError):
    """The monitor cannot start as configured; the message names the config key."""


class SourceNotStarted(RuntimeError):
    """A report arrived before the monitor was started (the servicer answers UNAVAILABLE)."""


class HardwareFaultSource(Protocol):
    name: str

    async def start(self, on_faults: FaultCallback) -> None:
        """Begins delivering batches of new or changed faults; returns once running."""

    async def stop(self) -> None:
        """Stops delivering; idempotent, cancels its tasks and waits for them."""


async def call_fault_callback(on_faults: FaultCallback, faults: list[HardwareFault]) -> None:
    result = on_faults(faults)
    if inspect.isawaitable(result):
        await result


def log_cleared(keys: Sequence[FaultKey], source: str) -> None:
    for codes, npu, node in keys:
        log.info("hardware fault cleared node=%s npu=%s codes=%s source=%s", node, npu or "<node>", ",".join(codes) or "-", source)


class RpcSource:
    """ReportHardwareFault: every valid report is delivered (the caller decided it is news)."""

    name = "rpc"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._on_faults: FaultCallback | None = None

    async def start(self, on_faults: FaultCallback) -> None:
        self._on_faults = on_faults

    async def stop(self) -> None:
        self._on_faults = None

    async def report(self, request: controller_pb2.ReportHardwareFaultRequest) -> HardwareFault:
        """Validates and delivers; raises HardwareFaultError (INVALID_ARGUMENT) or SourceNotStarted.

        Errors of the callback propagate, so the servicer can answer them instead of losing them.
        """
        fault = HardwareFault.from_request(request, now_sec=self._clock())
        on_faults = self._on_faults
        if on_faults is None:
            raise SourceNotStarted(f"hardware monitor is not running; report {fault.describe()} not taken")
        await call_fault_callback(on_faults, [fault])
        return fault


class DirectoryConfigMapSource:
    """Polls a directory of mounted device-info ConfigMaps.

    Accepted entries (anything starting with '.' is kubelet's bookkeeping and skipped):
    - `mindx-dl-deviceinfo-<node>/` holding key files (`DeviceInfoCfg`, `ManuallySeparateNPU`,
      `UpgradeFaultReason`), as kubelet mounts one ConfigMap, `..data` symlink swaps included;
    - a file `mindx-dl-deviceinfo-<node>[.json|.yaml]` holding the DeviceInfoCfg value, the data
      mapping or the whole ConfigMap object (a projected item or a `kubectl get -o json` dump).
    A document is re-read only when a key file's (inode, mtime, size) changed; only new or changed
    faults are delivered. A document that cannot be read at all keeps its last known faults.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        poll_interval_sec: float = 2.0,
        *,
        max_documents: int = MAX_DOCUMENTS,
        max_file_bytes: int = MAX_CONFIGMAP_BYTES,
    ) -> None:
        if poll_interval_sec <= 0:
            raise ValueError(f"poll_interval_sec={poll_interval_sec!r} must be > 0")
        self.path = Path(path)
        self.name = f"configmap-dir:{self.path}"
        self._poll_interval_sec = poll_interval_sec
        self._max_documents = max_documents
        self._max_file_bytes = max_file_bytes
        self._dedup = FaultDeduper()
        self._fingerprints: dict[str, tuple[tuple[str, int, int, int], ...]] = {}
        self._missing_logged = False
        self._task: asyncio.Task[None] | None = None
        self._on_faults: FaultCallback | None = None

    async def start(self, on_faults: FaultCallback) -> None:
        if self._task is not None:
            return
        self._on_faults = on_faults
        # The first scan completes before start returns: faults present at startup are delivered
        # before anything else is told the monitor runs.
        await self._scan_and_deliver()
        self._task = asyncio.create_task(self._run(), name=f"hardware-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval_sec)
            try:
                await self._scan_and_deliver()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("hardware: scan of %s failed; retrying in %.1fs", self.path, self._poll_interval_sec)

    async def _scan_and_deliver(self) -> None:
        faults = await asyncio.to_thread(self.scan)
        if faults and self._on_faults is not None:
            await call_fault_callback(self._on_faults, faults)

    def scan(self) -> list[HardwareFault]:
        """One pass over the directory; returns the new or changed faults. Blocking file I/O."""
        try:
            entries = sorted(os.scandir(self.path), key=lambda e: e.name)
        except OSError as exc:
            if not self._missing_logged:
                log.warning("hardware: ConfigMap directory %s unreadable (%s); known faults kept, still polling", self.path, exc.strerror or exc)
                self._missing_logged = True
            return []
        if self._missing_logged:
            log.info("hardware: ConfigMap directory %s readable again", self.path)
            self._missing_logged = False
        fresh: list[HardwareFault] = []
        seen: set[str] = set()
        for entry in entries:
            if entry.name.startswith("."):
                continue
            doc_name = entry.name
            for suffix in _FILE_SUFFIXES:
                doc_name = doc_name.removesuffix(suffix)
            node = node_from_configmap_name(doc_name)
            if node is None:
                continue
            if len(seen) >= self._max_documents:
                log.warning("hardware: %s holds more than %d device-info documents; %s and later ignored", self.path, self._max_documents, entry.name)
                break
            seen.add(doc_name)
            fresh += self._read_document(entry, doc_name, node)
        for gone in sorted(set(self._fingerprints) - seen):
            del self._fingerprints[gone]
            log.info("hardware: %s/%s removed", self.path, gone)
            log_cleared(self._dedup.forget(gone), self.name)
        return fresh

    def _read_document(self, entry: os.DirEntry[str], doc_name: str, node: str) -> list[HardwareFault]:
        try:
            if entry.is_dir(follow_symlinks=True):
                files = [(key, Path(entry.path) / key) for key in _KEY_FILES]
                files = [(key, path) for key, path in files if path.exists()]
            else:
                files = [("", Path(entry.path))]
            stats = [(key, path, path.stat()) for key, path in files]
            fingerprint = tuple((key, st.st_ino, st.st_mtime_ns, st.st_size) for key, _, st in stats)
            if fingerprint == self._fingerprints.get(doc_name):
                return []
            too_big = [str(path) for _, path, st in stats if st.st_size > self._max_file_bytes]
            if too_big:
                self._fingerprints[doc_name] = fingerprint
                log.warning("hardware: %s exceed %d bytes, not a ConfigMap; ignored", too_big, self._max_file_bytes)
                return []
            contents = {key: path.read_text(encoding="utf-8") for key, path, _ in stats}
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("hardware: cannot read %s (%s); retrying next poll", entry.path, exc)
            return []
        self._fingerprints[doc_name] = fingerprint
        doc: dict[str, str] | str = contents[""] if "" in contents else contents
        result = parse_configmap(doc, node_name=node, source=f"configmap:{entry.path}")
        for problem in result.problems:
            log.warning("hardware: node=%s %s", node, problem)
        if not result.faults and result.problems:
            return []  # unreadable as a whole: keep what we knew rather than "clear" everything
        new, cleared = self._dedup.update(doc_name, result.faults)
        log_cleared(cleared, self.name)
        return new


class ResourceMonitor:
    """Starts the configured sources and funnels their faults to one callback, logging each."""

    def __init__(self, sources: Sequence[HardwareFaultSource], rpc: RpcSource | None = None) -> None:
        self.rpc = rpc if rpc is not None else next((s for s in sources if isinstance(s, RpcSource)), RpcSource())
        self.sources: list[HardwareFaultSource] = list(sources)
        if self.rpc not in self.sources:
            self.sources.insert(0, self.rpc)
        self._on_faults: FaultCallback | None = None
        self._started: list[HardwareFaultSource] = []

    @classmethod
    def from_config(
        cls,
        config: HardwareMonitorConfig,
        *,
        clock: Callable[[], float] = time.time,
        kube_loader: Callable[[], tuple[KubeApi, str]] | None = None,
    ) -> ResourceMonitor:
        """Sources from `hardware_monitor`: the RPC always; the directory when configmap_dir is set;
        Kubernetes when `kubernetes` is "on" (required) or "auto" (when a config can be loaded)."""
        from motor.controller.hardware.kube import KubeUnavailable, KubernetesConfigMapSource, load_kube_api

        rpc = RpcSource(clock)
        sources: list[HardwareFaultSource] = [rpc]
        if config.configmap_dir:
            sources.append(DirectoryConfigMapSource(config.configmap_dir, config.poll_interval_sec))
            log.info("hardware monitor: watching mounted ConfigMaps in %s every %.1fs", config.configmap_dir, config.poll_interval_sec)
        if config.kubernetes != "off":
            try:
                api, how = (kube_loader or load_kube_api)()
            except KubeUnavailable as exc:
                if config.kubernetes == "on":
                    raise HardwareMonitorError(f"hardware_monitor.kubernetes='on' but {exc}") from None
                log.info("hardware monitor: Kubernetes source off (hardware_monitor.kubernetes='auto'): %s", exc)
            else:
                sources.append(KubernetesConfigMapSource(api))
                log.info("hardware monitor: Kubernetes list+watch of ConfigMaps and Nodes (%s)", how)
        return cls(sources, rpc=rpc)

    async def start(self, on_faults: FaultCallback) -> None:
        self._on_faults = on_faults
        try:
            for source in self.sources:
                await source.start(self._deliver_reporting if source is self.rpc else self._deliver_quietly)
                self._started.append(source)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        started, self._started = self._started, []
        for source in reversed(started):
            try:
                await source.stop()
            except Exception:
                log.exception("hardware monitor: stopping %s failed", source.name)

    async def _deliver_reporting(self, faults: list[HardwareFault]) -> None:
        self._log(faults)
        if self._on_faults is not None:
            await call_fault_callback(self._on_faults, faults)

    async def _deliver_quietly(self, faults: list[HardwareFault]) -> None:
        """Background sources: a failing callback is logged, never allowed to stop the source."""
        try:
            await self._deliver_reporting(faults)
        except Exception:
            log.exception("hardware monitor: fault intake failed for %d faults", len(faults))

    @staticmethod
    def _log(faults: list[HardwareFault]) -> None:
        for fault in faults:
            log.log(
                logging.WARNING if fault.severe else logging.INFO,
                "hardware fault node=%s npu=%s codes=%s level=L%d handling=%s type=%s time=%.3f source=%s",
                fault.node_name, fault.npu_name or "<node>", fault.fault_code or "-", fault.level,
                fault.fault_handling or "-", fault.fault_type or "-", fault.fault_time_unix_sec, fault.source,
            )
