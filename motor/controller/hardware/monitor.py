"""ResourceMonitor: Motor's listener for MindCluster hardware and node faults (RFC §4.4).

It is an adapter, not a MindCluster component: sources read what MindCluster publishes, turn it
into HardwareFaults, and hand new or changed ones to one callback (the FaultManager's intake).
Sources behind one protocol (`sources.base.HardwareFaultSource`):

- RpcSource (`sources.rpc`): what the Controller's ReportHardwareFault servicer calls.
- DirectoryConfigMapSource (`sources.directory`): device-info and NodeD node-info ConfigMaps mounted
  as files, polled.
- KubernetesConfigMapSource (`sources.kube_watch`): list+watch of `kube-system/mindx-dl-deviceinfo-*`,
  `mindx-dl/mindx-dl-nodeinfo-*` and of Nodes (NotReady).

I/O happens only in the sources; parsing, de-duplication and mapping are pure modules.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.base import FaultCallback, HardwareFaultSource, call_fault_callback
from motor.controller.hardware.sources.directory import DirectoryConfigMapSource
from motor.controller.hardware.sources.kube_api import KubeApi, KubeUnavailable, load_kube_api
from motor.controller.hardware.sources.kube_watch import KubernetesConfigMapSource
from motor.controller.hardware.sources.rpc import RpcSource, SourceNotStarted

if TYPE_CHECKING:
    from motor.controller.config import HardwareMonitorConfig

log = logging.getLogger(__name__)

# SourceNotStarted is what the servicer catches; it is re-exported here with the monitor it guards.
__all__ = ["HardwareMonitorError", "ResourceMonitor", "SourceNotStarted"]


class HardwareMonitorError(RuntimeError):
    """The monitor cannot start as configured; the message names the config key."""


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
                log.info("hardware monitor: Kubernetes list+watch of device-info and node-info ConfigMaps and Nodes (%s)",
                         how)
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
