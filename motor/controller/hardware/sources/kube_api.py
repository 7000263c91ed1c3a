"""The Kubernetes calls the hardware source needs, behind a protocol of plain dicts.

`KubeApi` is what `kube_watch.KubernetesConfigMapSource` drives (tests give it a fake); the official
`kubernetes` client behind it is imported only by `load_kube_api` and `KubernetesClientApi`, so
Motor runs without the package.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

# A watch's socket read may last the server-side watch timeout plus this margin.
_READ_MARGIN_SEC = 30
_REQUEST_TIMEOUT_SEC = 30


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
