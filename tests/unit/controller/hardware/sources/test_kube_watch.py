"""KubernetesConfigMapSource: event handling on plain dicts, and list+watch against a fake API."""

from __future__ import annotations

from typing import Any

from motor.controller.hardware.formats import levels
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
