"""KubernetesConfigMapSource: event handling on plain dicts, and list+watch against a fake API."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from motor.controller.hardware import levels
from motor.controller.hardware.injection.configmaps import build_configmap, build_nodeinfo_configmap
from motor.controller.hardware.model import HardwareFault
from motor.controller.hardware.sources.kube_watch import KubernetesConfigMapSource

from ..samples import NODE_READY, configmap_object, full_data, node_not_ready
from ..support import LOST, NODED, OTHER, RESET, Clock, FakeKubeApi, Sink, fault_keys, wait_until


def _cm(node: str, faults: list[HardwareFault], rv: str = "1") -> dict[str, Any]:
    obj = build_configmap(node, faults)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_configmap_events() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert fault_keys(source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))) == {LOST.key}
    assert source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST], rv="2")) == []  # refresh only
    assert fault_keys(source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST, RESET], rv="3"))) == {RESET.key}
    fresh = source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST, RESET], rv="3"))
    assert fresh == []
    assert source.handle_configmap_event("BOOKMARK", {"metadata": {"resourceVersion": "9"}}) == []
    other = configmap_object("node-x", full_data())
    other["metadata"]["name"] = "coredns"
    assert source.handle_configmap_event("ADDED", other) == []  # not a device-info ConfigMap
    assert source.handle_configmap_event("DELETED", _cm("node-a", [])) == []
    (back,) = source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))  # new again
    assert back.key == LOST.key and back.source == "k8s:configmap/kube-system/mindx-dl-deviceinfo-node-a"


def test_configmap_sync_forgets_what_disappeared() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert fault_keys(source.handle_configmap_sync([_cm("node-a", [LOST]), _cm("node-b", [OTHER])])) == {LOST.key, OTHER.key}
    assert source.handle_configmap_sync([_cm("node-b", [OTHER])]) == []  # node-a's ConfigMap is gone
    assert fault_keys(source.handle_configmap_sync([_cm("node-a", [LOST]), _cm("node-b", [OTHER])])) == {LOST.key}


def test_unreadable_configmap_keeps_known_faults() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    source.handle_configmap_event("ADDED", _cm("node-a", [LOST]))
    broken = _cm("node-a", [LOST], rv="5")
    broken["data"]["DeviceInfoCfg"] = "{"
    assert source.handle_configmap_event("MODIFIED", broken) == []
    assert source.handle_configmap_event("MODIFIED", _cm("node-a", [LOST], rv="6")) == []


def test_node_events() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi())
    assert source.handle_node_event("ADDED", NODE_READY) == []
    (down,) = source.handle_node_event("MODIFIED", node_not_ready())
    assert (down.node_name, down.npu_name, down.level, down.source) == ("worker-7", "", levels.L6, "k8s:node/worker-7")
    assert source.handle_node_event("MODIFIED", node_not_ready()) == []  # status heartbeat, same transition
    assert source.handle_node_event("MODIFIED", NODE_READY) == []  # recovered
    again = source.handle_node_event("MODIFIED", node_not_ready(status="False", when="2025-10-09T10:00:00Z"))
    assert len(again) == 1
    assert source.handle_node_event("DELETED", NODE_READY) == []
    assert source.handle_node_sync([node_not_ready(status="False", when="2025-10-09T10:00:00Z")]) != []


async def test_list_then_watch_then_relist_after_410_and_retry_after_failure() -> None:
    api = FakeKubeApi()
    api.fail_next_list = 1  # first list fails: retried after the backoff
    api.configmaps = [_cm("node-a", [LOST])]
    api.nodes = [NODE_READY]
    api.cm_watches = [
        [("MODIFIED", _cm("node-a", [LOST], rv="101")), ("MODIFIED", _cm("node-a", [LOST, RESET], rv="102")),
         ("BOOKMARK", {"metadata": {"resourceVersion": "150"}}),
         ("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})],
    ]
    api.node_watches = [[("MODIFIED", node_not_ready())]]
    sink = Sink()
    source = KubernetesConfigMapSource(api, watch_timeout_sec=5, retry_backoff_sec=0.01)
    await source.start(sink)
    try:
        expected = {LOST.key, RESET.key, (("NodeNotReady",), "", "worker-7")}
        await wait_until(lambda: fault_keys(sink.faults) == expected, "three faults")
        await wait_until(lambda: api.calls.count("watch cm 100") >= 2, "the relist after 410")
    finally:
        await source.stop()
    cm_calls = [c for c in api.calls if "cm" in c and "mindx-dl" not in c]
    # failed list, list, watch from the list's version, 410 → list again, watch again.
    assert cm_calls[:5] == ["list cm kube-system", "list cm kube-system", "watch cm 100", "list cm kube-system", "watch cm 100"]
    assert "watch nodes 200" in api.calls
    assert api.stopped.is_set()
    # The relist after 410 delivered nothing new: everything was known.
    assert len(sink.faults) == 3


def test_kubernetes_nodeinfo_events_in_their_own_namespace() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi(), clock=Clock())
    noded = build_nodeinfo_configmap("node-a", [NODED])
    (got,) = source.handle_configmap_event("ADDED", noded, "mindx-dl")
    assert got.source == "k8s:configmap/mindx-dl/mindx-dl-nodeinfo-node-a" and got.whole_node
    # Each kind counts in its own namespace only.
    assert source.handle_configmap_event("ADDED", noded, "kube-system") == []
    assert source.handle_configmap_event("ADDED", _cm("node-b", [OTHER]), "mindx-dl") == []
    # NodeD deletes its ConfigMap when the node is healthy again; a device-info sync does not forget it.
    assert source.handle_configmap_sync([_cm("node-b", [OTHER])], "kube-system") != []
    assert source.handle_configmap_sync([noded], "mindx-dl") == []
    assert source.handle_configmap_event("DELETED", noded, "mindx-dl") == []
    (back,) = source.handle_configmap_event("ADDED", noded, "mindx-dl")
    assert back.key == got.key


async def test_list_and_watch_noded_configmaps() -> None:
    api = FakeKubeApi()
    api.nodeinfos = [build_nodeinfo_configmap("node-a", [NODED])]
    later = HardwareFault("node-c", "", ("0C000026",), levels.L6, "NodeDFault:CPU", "SeparateFault", 0.0)
    api.nodeinfo_watches = [[("ADDED", build_nodeinfo_configmap("node-c", [later]))]]
    sink = Sink()
    source = KubernetesConfigMapSource(api, watch_nodes=False, watch_timeout_sec=5, retry_backoff_sec=0.01)
    await source.start(sink)
    try:
        await wait_until(lambda: {f.node_name for f in sink.faults} == {"node-a", "node-c"}, "both NodeD faults")
    finally:
        await source.stop()
    assert "list cm mindx-dl" in api.calls and "watch nodeinfo 300" in api.calls


# --- Kubernetes: backoff between failed lists and watches --------------------------------------


class RecordingStop:
    """Stands in for the source's stop flag: records each backoff sleep, and is set after `limit` of them."""

    def __init__(self, limit: int) -> None:
        self.waits: list[float] = []
        self._limit = limit
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout if timeout is not None else -1.0)
        self._set = len(self.waits) >= self._limit
        return self._set


class PostEverything:
    """Stands in for the event loop: accepts every posted event."""

    def call_soon_threadsafe(self, *args: Any) -> None:
        return None


def _failing(failures: int, result: tuple[list[dict[str, Any]], str] = ([], "1")):
    calls = {"n": 0}

    def call() -> tuple[list[dict[str, Any]], str]:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise ConnectionError("apiserver unreachable")
        return result

    return call


def test_failed_lists_back_off_exponentially_up_to_30_s() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi(), retry_backoff_sec=2.0)
    source._stopping = RecordingStop(limit=7)  # type: ignore[assignment]
    source._pump("configmaps", _failing(failures=100), lambda version: iter(()))
    assert source._stopping.waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_a_successful_list_restarts_the_backoff_and_a_failed_watch_is_its_first_step() -> None:
    source = KubernetesConfigMapSource(FakeKubeApi(), retry_backoff_sec=2.0)
    source._loop = PostEverything()  # type: ignore[assignment]
    source._stopping = RecordingStop(limit=7)  # type: ignore[assignment]
    lists = _failing(failures=3)

    def flaky_list() -> tuple[list[dict[str, Any]], str]:
        if len(source._stopping.waits) == 4:  # after the first failed watch, the apiserver is down once more
            raise ConnectionError("apiserver unreachable")
        return lists()

    def failing_watch(version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        raise ConnectionError("watch reset")

    source._pump("configmaps", flaky_list, failing_watch)
    # three failed lists (2, 4, 8); a list that works, a failed watch (2), a failed list (4); then
    # twice a list that works and a failed watch (2); then stopped.
    assert source._stopping.waits == [2.0, 4.0, 8.0, 2.0, 4.0, 2.0, 2.0]


async def test_stop_ends_a_backoff_at_once(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeKubeApi()
    api.fail_next_list = 1000
    source = KubernetesConfigMapSource(api, nodeinfo_namespace=None, watch_nodes=False, retry_backoff_sec=30.0)
    await source.start(Sink())
    await wait_until(lambda: "list cm kube-system" in api.calls, "the first list")
    caplog.set_level(logging.INFO, logger="motor.controller.hardware")
    await source.stop()
    assert "still in a blocking read" not in caplog.text  # the thread left its 30 s backoff at once
    assert api.calls == ["list cm kube-system"]
