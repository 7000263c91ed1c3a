"""DirectoryConfigMapSource: MindCluster ConfigMaps mounted as files (kubelet's layout), polled:
the device plugin's `mindx-dl-deviceinfo-<node>` and NodeD's `mindx-dl-nodeinfo-<node>`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from motor.controller.hardware.formats.configmap import parse_configmap
from motor.controller.hardware.formats.names import (
    DEVICE_INFO_KEY,
    MANUALLY_SEPARATE_KEY,
    NODEINFO_KEY,
    SWITCH_INFO_KEY,
    UPGRADE_REASON_KEY,
    document_kind,
)
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.base import FaultCallback, absorb, call_fault_callback, log_cleared
from motor.controller.hardware.sources.dedup import FaultDeduper

log = logging.getLogger(__name__)

# A ConfigMap holds at most 1 MiB; a bigger file is not one.
MAX_CONFIGMAP_BYTES = 1 << 20
# Bound of one directory scan (documents per poll).
MAX_DOCUMENTS = 4096
_KEY_FILES = (DEVICE_INFO_KEY, SWITCH_INFO_KEY, MANUALLY_SEPARATE_KEY, UPGRADE_REASON_KEY, NODEINFO_KEY)
_FILE_SUFFIXES = (".json", ".yaml", ".yml")


class DirectoryConfigMapSource:
    """Polls a directory of mounted MindCluster ConfigMaps.

    Accepted entries (anything starting with '.' is kubelet's bookkeeping and skipped), for
    `mindx-dl-deviceinfo-<node>` and `mindx-dl-nodeinfo-<node>` alike:
    - `<name>/` holding key files (`DeviceInfoCfg`, `SwitchInfoCfg`, `ManuallySeparateNPU`,
      `UpgradeFaultReason`; NodeD's `NodeInfo`), as kubelet mounts one ConfigMap, `..data` symlink
      swaps included;
    - a file `<name>[.json|.yaml]` holding one key's value (DeviceInfoCfg or NodeInfo), the data
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        if poll_interval_sec <= 0:
            raise ValueError(f"poll_interval_sec={poll_interval_sec!r} must be > 0")
        self.path = Path(path)
        self.name = f"configmap-dir:{self.path}"
        self._poll_interval_sec = poll_interval_sec
        self._max_documents = max_documents
        self._max_file_bytes = max_file_bytes
        self._clock = clock
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
            named = document_kind(doc_name)
            if named is None:
                continue
            if len(seen) >= self._max_documents:
                log.warning("hardware: %s holds more than %d device-info documents; %s and later ignored", self.path, self._max_documents, entry.name)
                break
            seen.add(doc_name)
            fresh += self._read_document(entry, doc_name, *named)
        for gone in sorted(set(self._fingerprints) - seen):
            del self._fingerprints[gone]
            log.info("hardware: %s/%s removed", self.path, gone)
            log_cleared(self._dedup.forget(gone), self.name)
        return fresh

    def _read_document(self, entry: os.DirEntry[str], doc_name: str, kind: str, node: str) -> list[HardwareFault]:
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
        result = parse_configmap(doc, node_name=node, source=f"configmap:{entry.path}", kind=kind)
        return absorb(self._dedup, doc_name, result, self.name, where=f"node={node} ", now_sec=self._clock())
