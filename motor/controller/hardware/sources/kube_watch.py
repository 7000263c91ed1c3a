"""KubernetesConfigMapSource: list+watch of MindCluster's ConfigMaps and of Nodes.

Three streams: the device plugin's `kube-system/mindx-dl-deviceinfo-*` (DeviceInfoCfg, SwitchInfoCfg,
ManuallySeparateNPU), NodeD's `mindx-dl/mindx-dl-nodeinfo-*` (NodeInfo) and the Nodes (Ready). A
ConfigMap counts only in its own namespace (a deviceinfo name in mindx-dl is not the plugin's).

The `kubernetes` client is synchronous, so each stream (ConfigMaps, Nodes) runs list-then-watch in
its own daemon thread and posts raw events to the event loop; parsing and de-duplication happen on
the loop (`handle_*`, pure given plain dicts, and what the unit tests drive). The client is imported
only by `load_kube_api`, so Motor runs without it.

Bounds: a watch lasts at most `watch_timeout_sec` (server-side) and its socket read at most that
plus a margin, after which the stream resumes from the last resourceVersion; a 410 Gone relists;
other failures back off exponentially up to 30 s. `stop()` flags the threads and stops the
client's watches; a thread blocked in a read ends at the read bound at the latest (daemon, never
joined beyond a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tenacity import Retrying, RetryCallState, retry_if_exception_type, wait_exponential

from motor.controller.hardware.formats.configmap import parse_configmap
from motor.controller.hardware.formats.names import (
    CONFIGMAP_NAMESPACE,
    DEVICE_INFO,
    NODE_INFO,
    NODEINFO_NAMESPACE,
    ParseResult,
    document_kind,
)
from motor.controller.hardware.formats.node_ready import parse_node
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.base import FaultCallback, absorb, call_fault_callback, log_cleared
from motor.controller.hardware.sources.dedup import FaultDeduper
from motor.controller.hardware.sources.kube_api import KubeApi

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
NODEINFOS = "nodeinfos"
NODES = "nodes"
_MAX_BACKOFF_SEC = 30.0
_GONE = 410
_MIN_WATCH_SEC = 1.0
_EventHandler = Callable[[str, Mapping[str, Any]], list[HardwareFault]]


def _object_name(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def _is_gone(exc: BaseException) -> bool:
    return isinstance(exc, _Expired) or getattr(exc, "status", None) == _GONE


class KubernetesConfigMapSource:
    name = "k8s"

    def __init__(
        self,
        api: KubeApi,
        clock: Callable[[], float] = time.time,
        *,
        namespace: str = CONFIGMAP_NAMESPACE,
        nodeinfo_namespace: str | None = NODEINFO_NAMESPACE,
        watch_nodes: bool = True,
        watch_timeout_sec: int = 240,
        retry_backoff_sec: float = 2.0,
    ) -> None:
        self._api = api
        self._clock = clock
        self._namespace = namespace
        self._nodeinfo_namespace = nodeinfo_namespace
        # The document kind each watched namespace holds.
        self._kinds = {namespace: DEVICE_INFO}
        if nodeinfo_namespace is not None:
            self._kinds[nodeinfo_namespace] = NODE_INFO
        self._watch_nodes = watch_nodes
        self._watch_timeout_sec = watch_timeout_sec
        self._retry_backoff_sec = retry_backoff_sec
        self._dedup = FaultDeduper()
        self._configmaps: dict[str, set[str]] = {ns: set() for ns in self._kinds}
        self._nodes: set[str] = set()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batches: asyncio.Queue[list[HardwareFault]] | None = None
        self._consumer: asyncio.Task[None] | None = None

    # --- pure event handling (loop thread) --------------------------------------------------

    def handle_configmap_event(
        self, event_type: str, obj: Mapping[str, Any], namespace: str | None = None
    ) -> list[HardwareFault]:
        """ADDED / MODIFIED / DELETED of a ConfigMap in a watched namespace → new or changed faults."""
        namespace = namespace or self._namespace
        name = _object_name(obj)
        named = document_kind(name) if name is not None else None
        if name is None or named is None or named[0] != self._kinds.get(namespace):
            return []
        kind, node = named
        if event_type == "DELETED":
            log.info("hardware: ConfigMap %s/%s deleted", namespace, name)
        return self._handle(
            self._configmaps[namespace], name, f"cm/{namespace}/{name}", f"k8s:configmap/{namespace}/{name}", event_type,
            lambda source: parse_configmap(obj, node_name=node, source=source, kind=kind),
        )

    def handle_configmap_sync(self, items: list[Mapping[str, Any]], namespace: str | None = None) -> list[HardwareFault]:
        """A full list (start, or relist after 410): also forgets ConfigMaps deleted meanwhile."""
        namespace = namespace or self._namespace
        kind = self._kinds.get(namespace)
        return self._sync(items, self._configmaps[namespace],
                          lambda event, obj: self.handle_configmap_event(event, obj, namespace),
                          lambda name: (document_kind(name) or ("", ""))[0] == kind)

    def handle_node_event(self, event_type: str, obj: Mapping[str, Any]) -> list[HardwareFault]:
        name = _object_name(obj)
        if name is None:
            return []
        return self._handle(
            self._nodes, name, f"node/{name}", f"k8s:node/{name}", event_type,
            lambda source: parse_node(obj, source=source),
        )

    def handle_node_sync(self, items: list[Mapping[str, Any]]) -> list[HardwareFault]:
        return self._sync(items, self._nodes, self.handle_node_event, lambda name: True)

    def _handle(
        self, known: set[str], name: str, doc_key: str, source: str, event_type: str,
        parse: Callable[[str], ParseResult],
    ) -> list[HardwareFault]:
        if event_type == "DELETED":
            known.discard(name)
            log_cleared(self._dedup.forget(doc_key), source)
            return []
        if event_type not in ("ADDED", "MODIFIED"):
            return []
        known.add(name)
        return absorb(self._dedup, doc_key, parse(source), source, now_sec=self._clock())

    @staticmethod
    def _sync(
        items: list[Mapping[str, Any]], known: set[str], handle: _EventHandler, wanted: Callable[[str], bool]
    ) -> list[HardwareFault]:
        fresh: list[HardwareFault] = []
        listed: set[str] = set()
        for obj in items:
            name = _object_name(obj)
            if name is not None and wanted(name):
                listed.add(name)
                fresh += handle("MODIFIED", obj)
        for gone in sorted(known - listed):
            handle("DELETED", {"metadata": {"name": gone}})
        return fresh

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, on_faults: FaultCallback) -> None:
        if self._consumer is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._batches = asyncio.Queue()
        self._stopping.clear()
        self._consumer = asyncio.create_task(self._consume(on_faults), name="hardware-k8s-intake")
        streams: list[tuple[str, Callable[[], tuple[list[dict[str, Any]], str]], Callable[[str], Iterator[tuple[str, dict[str, Any]]]]]] = [
            (
                kind_stream,
                lambda ns=ns: self._api.list_configmaps(ns),
                lambda rv, ns=ns: self._api.watch_configmaps(ns, rv, self._watch_timeout_sec),
            )
            for kind_stream, ns in ((CONFIGMAPS, self._namespace), (NODEINFOS, self._nodeinfo_namespace))
            if ns is not None
        ]
        if self._watch_nodes:
            streams.append((NODES, self._api.list_nodes, lambda rv: self._api.watch_nodes(rv, self._watch_timeout_sec)))
        for kind, list_fn, watch_fn in streams:
            thread = threading.Thread(target=self._pump, args=(kind, list_fn, watch_fn), name=f"motor-k8s-{kind}", daemon=True)
            self._threads.append(thread)
            thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(Exception):
            self._api.stop()
        threads, self._threads = self._threads, []
        for thread in threads:
            await asyncio.to_thread(thread.join, 1.0)
            if thread.is_alive():
                log.info("hardware: %s still in a blocking read; it ends at its read bound", thread.name)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

    async def _consume(self, on_faults: FaultCallback) -> None:
        assert self._batches is not None
        while True:
            batch = await self._batches.get()
            await call_fault_callback(on_faults, batch)

    def _dispatch(self, kind: str, event_type: str, payload: Any) -> None:
        """Loop thread: one raw event → faults → the delivery queue."""
        if kind in (CONFIGMAPS, NODEINFOS):
            namespace = self._namespace if kind == CONFIGMAPS else self._nodeinfo_namespace
            if event_type == "SYNC":
                faults = self.handle_configmap_sync(payload, namespace)
            else:
                faults = self.handle_configmap_event(event_type, payload, namespace)
        else:
            faults = self.handle_node_sync(payload) if event_type == "SYNC" else self.handle_node_event(event_type, payload)
        if faults and self._batches is not None:
            self._batches.put_nowait(faults)

    def _post(self, kind: str, event_type: str, payload: Any) -> bool:
        loop = self._loop
        if loop is None or self._stopping.is_set():
            return False
        try:
            loop.call_soon_threadsafe(self._dispatch, kind, event_type, payload)
        except RuntimeError:  # loop closed
            return False
        return True

    def _pump(
        self,
        kind: str,
        list_fn: Callable[[], tuple[list[dict[str, Any]], str]],
        watch_fn: Callable[[str], Iterator[tuple[str, dict[str, Any]]]],
    ) -> None:
        """Worker thread: list, then watch from the list's resourceVersion, until stopped.

        A 410 relists at once. Any other failure backs off exponentially (capped at 30 s), counted
        from the last successful list: a failed watch is the first step, each failed list after it
        one more, so an apiserver that answers the list but refuses the watch is not hammered.
        """
        list_backoff_sec = self._retry_backoff_sec
        while not self._stopping.is_set():
            listed = self._list(kind, list_fn, list_backoff_sec)
            if listed is None or not self._post(kind, "SYNC", listed[0]):
                return
            list_backoff_sec = self._retry_backoff_sec
            try:
                self._watch(kind, listed[1], watch_fn)
                return
            except Exception as exc:
                if self._stopping.is_set():
                    return
                if _is_gone(exc):
                    log.info("hardware: %s watch expired (410); listing again", kind)
                    continue
                log.warning("hardware: %s list/watch failed (%s); retrying in %.1fs", kind, exc,
                            self._retry_backoff_sec)
                if self._stopping.wait(self._retry_backoff_sec):
                    return
                list_backoff_sec = self._retry_backoff_sec * 2  # the failed watch took the first step

    def _list(
        self, kind: str, list_fn: Callable[[], tuple[list[dict[str, Any]], str]], first_backoff_sec: float
    ) -> tuple[list[dict[str, Any]], str] | None:
        """The stream's list, retried with exponential backoff from `first_backoff_sec` (capped at
        30 s); None once the source stops (`stop()` ends a backoff sleep at once)."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning("hardware: %s list/watch failed (%s); retrying in %.1fs", kind, exc, state.upcoming_sleep)

        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            stop=lambda _state: self._stopping.is_set(),
            wait=wait_exponential(multiplier=first_backoff_sec, max=_MAX_BACKOFF_SEC),
            sleep=self._stopping.wait,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if self._stopping.is_set():
                        return None
                    return list_fn()
        except Exception:  # the last failure, raised once stopping ended the retries
            return None
        return None

    def _watch(self, kind: str, version: str, watch_fn: Callable[[str], Iterator[tuple[str, dict[str, Any]]]]) -> None:
        """Watches from `version`, resuming after each server-side timeout, until stopped; raises on
        failure (_Expired on 410)."""
        while not self._stopping.is_set():
            started_sec = time.monotonic()
            for event_type, obj in watch_fn(version):
                if self._stopping.is_set():
                    return
                if event_type == "ERROR":
                    if obj.get("code") == _GONE:
                        raise _Expired(obj.get("message", ""))
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message', obj)}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event_type != "BOOKMARK" and not self._post(kind, event_type, obj):
                    return
            if time.monotonic() - started_sec < _MIN_WATCH_SEC:
                # A server that ends watches at once must not turn this into a busy loop.
                self._stopping.wait(_MIN_WATCH_SEC)
