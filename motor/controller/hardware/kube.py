"""KubernetesConfigMapSource: list+watch of `kube-system/mindx-dl-deviceinfo-*` and of Nodes.

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
from typing import Any, Protocol

from motor.controller.hardware.dedup import FaultDeduper
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.monitor import FaultCallback, call_fault_callback, log_cleared
from motor.controller.hardware.parser import (
    CONFIGMAP_NAMESPACE,
    node_from_configmap_name,
    parse_configmap,
    parse_node,
)

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
NODES = "nodes"
_MAX_BACKOFF_SEC = 30.0
_READ_MARGIN_SEC = 30
_REQUEST_TIMEOUT_SEC = 30
_GONE = 410
_MIN_WATCH_SEC = 1.0


class KubeUnavailable(RuntimeError):
    """No usable Kubernetes client or configuration; the message says which."""


class KubeApi(Protocol):
    """The four blocking calls the source needs; objects as plain dicts (`kubectl get -o json`)."""

    def list_configmaps(self, namespace: str) -> tuple[list[dict[str, Any]], str]: ...

    def watch_configmaps(self, namespace: str, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch_nodes(self, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def stop(self) -> None:
        """Best effort: ends the watches in progress."""


def load_kube_api() -> tuple[KubeApi, str]:
    """In-cluster config, else a kubeconfig; returns (api, how) or raises KubeUnavailable."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise KubeUnavailable(f"the kubernetes package is not installed ({exc})") from None
    try:
        config.load_incluster_config()
        how = "in-cluster config"
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config()
            how = "kubeconfig"
        except Exception as exc:  # the loader raises ConfigException, OSError or parser errors
            raise KubeUnavailable(f"no in-cluster config ({in_cluster}) and no usable kubeconfig ({exc})") from None
    return KubernetesClientApi(client.ApiClient()), how


class KubernetesClientApi:
    """KubeApi over the official `kubernetes` client (imported lazily)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client, watch

        self._core = client.CoreV1Api(api_client)
        self._to_dict: Callable[[Any], Any] = api_client.sanitize_for_serialization
        self._watch_type = watch.Watch
        self._lock = threading.Lock()
        self._watches: set[Any] = set()

    def list_configmaps(self, namespace: str) -> tuple[list[dict[str, Any]], str]:
        resp = self._core.list_namespaced_config_map(namespace, _request_timeout=_REQUEST_TIMEOUT_SEC)
        return [self._to_dict(item) for item in resp.items], resp.metadata.resource_version

    def watch_configmaps(self, namespace: str, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._stream(self._core.list_namespaced_config_map, resource_version, timeout_sec, namespace)

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        resp = self._core.list_node(_request_timeout=_REQUEST_TIMEOUT_SEC)
        return [self._to_dict(item) for item in resp.items], resp.metadata.resource_version

    def watch_nodes(self, resource_version: str, timeout_sec: int) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._stream(self._core.list_node, resource_version, timeout_sec)

    def stop(self) -> None:
        with self._lock:
            watches = list(self._watches)
        for w in watches:
            w.stop()

    def _stream(self, func: Any, resource_version: str, timeout_sec: int, *args: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        w = self._watch_type()
        with self._lock:
            self._watches.add(w)
        try:
            for event in w.stream(
                func, *args, resource_version=resource_version, timeout_seconds=timeout_sec,
                allow_watch_bookmarks=True, _request_timeout=timeout_sec + _READ_MARGIN_SEC,
            ):
                kind = event.get("type", "")
                if kind == "ERROR":
                    yield kind, dict(event.get("raw_object") or {})
                else:
                    yield kind, self._to_dict(event.get("object"))
        finally:
            w.stop()
            with self._lock:
                self._watches.discard(w)


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def _is_gone(exc: BaseException) -> bool:
    return isinstance(exc, _Expired) or getattr(exc, "status", None) == _GONE


class KubernetesConfigMapSource:
    name = "k8s"

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str = CONFIGMAP_NAMESPACE,
        watch_nodes: bool = True,
        watch_timeout_sec: int = 240,
        retry_backoff_sec: float = 2.0,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._watch_nodes = watch_nodes
        self._watch_timeout_sec = watch_timeout_sec
        self._retry_backoff_sec = retry_backoff_sec
        self._dedup = FaultDeduper()
        self._configmaps: set[str] = set()
        self._nodes: set[str] = set()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batches: asyncio.Queue[list[HardwareFault]] | None = None
        self._consumer: asyncio.Task[None] | None = None

    # --- pure event handling (loop thread) --------------------------------------------------

    def handle_configmap_event(self, event_type: str, obj: Mapping[str, Any]) -> list[HardwareFault]:
        """ADDED / MODIFIED / DELETED of a ConfigMap in the namespace → new or changed faults."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or node_from_configmap_name(name) is None:
            return []
        source = f"k8s:configmap/{self._namespace}/{name}"
        if event_type == "DELETED":
            self._configmaps.discard(name)
            log.info("hardware: ConfigMap %s/%s deleted", self._namespace, name)
            log_cleared(self._dedup.forget(f"cm/{name}"), source)
            return []
        if event_type not in ("ADDED", "MODIFIED"):
            return []
        self._configmaps.add(name)
        result = parse_configmap(obj, source=source)
        for problem in result.problems:
            log.warning("hardware: %s", problem)
        if not result.faults and result.problems:
            return []  # unreadable as a whole: keep what we knew
        fresh, cleared = self._dedup.update(f"cm/{name}", result.faults)
        log_cleared(cleared, source)
        return fresh

    def handle_configmap_sync(self, items: list[Mapping[str, Any]]) -> list[HardwareFault]:
        """A full list (start, or relist after 410): also forgets ConfigMaps deleted meanwhile."""
        fresh: list[HardwareFault] = []
        listed: set[str] = set()
        for obj in items:
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
            if isinstance(name, str) and node_from_configmap_name(name) is not None:
                listed.add(name)
                fresh += self.handle_configmap_event("MODIFIED", obj)
        for gone in sorted(self._configmaps - listed):
            self.handle_configmap_event("DELETED", {"metadata": {"name": gone}})
        return fresh

    def handle_node_event(self, event_type: str, obj: Mapping[str, Any]) -> list[HardwareFault]:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            return []
        source = f"k8s:node/{name}"
        if event_type == "DELETED":
            self._nodes.discard(name)
            log_cleared(self._dedup.forget(f"node/{name}"), source)
            return []
        if event_type not in ("ADDED", "MODIFIED"):
            return []
        self._nodes.add(name)
        result = parse_node(obj, source=source)
        for problem in result.problems:
            log.warning("hardware: %s", problem)
        if not result.faults and result.problems:
            return []
        fresh, cleared = self._dedup.update(f"node/{name}", result.faults)
        log_cleared(cleared, source)
        return fresh

    def handle_node_sync(self, items: list[Mapping[str, Any]]) -> list[HardwareFault]:
        fresh: list[HardwareFault] = []
        listed: set[str] = set()
        for obj in items:
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
            if isinstance(name, str) and name:
                listed.add(name)
                fresh += self.handle_node_event("MODIFIED", obj)
        for gone in sorted(self._nodes - listed):
            self.handle_node_event("DELETED", {"metadata": {"name": gone}})
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
                CONFIGMAPS,
                lambda: self._api.list_configmaps(self._namespace),
                lambda rv: self._api.watch_configmaps(self._namespace, rv, self._watch_timeout_sec),
            )
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
        if kind == CONFIGMAPS:
            faults = self.handle_configmap_sync(payload) if event_type == "SYNC" else self.handle_configmap_event(event_type, payload)
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
        """Worker thread: list, then watch from the list's resourceVersion, until stopped."""
        backoff = self._retry_backoff_sec
        while not self._stopping.is_set():
            try:
                items, version = list_fn()
                if not self._post(kind, "SYNC", items):
                    return
                backoff = self._retry_backoff_sec
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
            except Exception as exc:
                if self._stopping.is_set():
                    return
                if _is_gone(exc):
                    log.info("hardware: %s watch expired (410); listing again", kind)
                    continue
                log.warning("hardware: %s list/watch failed (%s); retrying in %.1fs", kind, exc, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SEC)
