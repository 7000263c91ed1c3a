"""Hardware-fault intake (RFC §4.2, §4.4): what MindCluster publishes, every source of it, and the
ReportHardwareFault RPC → HardwareFaults → original DP ranks per instance.

Sources read (see `formats.names` for why Volcano's vcjob-fault-npu-cm is not): the device plugin's
`kube-system/mindx-dl-deviceinfo-<node>` (DeviceInfoCfg: `-Fault` entries and the -Unhealthy /
-NetworkUnhealthy / -Recovering card lists; SwitchInfoCfg; ManuallySeparateNPU), NodeD's
`mindx-dl/mindx-dl-nodeinfo-<node>` (NodeInfo), the Kubernetes Node Ready condition, and the RPC.
2023's and today's formats alike; every level name of every source (`levels`); every card
name form (`formats.card_names`: Ascend910-N, Ascend310P-N, npu-N on A5, 310P mixed insert, an
operator's prefix from `hardware_monitor.card_name_prefixes`, vNPUs, share slices) mapped to its
physical card.

Layout:
- `levels` (the one level table: every source's level names → L1–L6, pure), `model`
  (HardwareFault, pure), `resolver` (faults → ranks, pure), `monitor` (ResourceMonitor:
  the sources from config, one callback);
- `formats/`, pure, one module per MindCluster object: `names` (names and constants, ParseResult),
  `card_names` (card name forms → physical card), `check_code`
  (CheckCodes, Go's json.Marshal), `configmap` (a ConfigMap in any shape → the parser of its kind),
  `device_info` (the device plugin's DeviceInfoCfg and ManuallySeparateNPU), `device_faults` (one
  `…-Fault` list of DeviceFault entries), `switch_info` (SwitchInfoCfg → the node's switch fault),
  `node_info` (NodeD's NodeInfo → node faults), `node_ready` (a Kubernetes Node NotReady → fault);
- `sources/`: `base` (callback type, source protocol, document → new faults), `dedup` (new or
  changed only; first-sighting stamps, pure), `rpc` (ReportHardwareFault), `directory` (mounted
  ConfigMaps, polled), `kube_api` (the Kubernetes calls, client loaded lazily), `kube_watch`
  (list+watch of both ConfigMap kinds and Nodes);
- `injection/`, for the demo tooling and tests: `configmaps` (real-format documents: device-info,
  switch info, NodeD nodeinfo) and `report_request` (the ReportHardwareFault request, the names each
  source writes).

The registered `device_infos[].device_id` are the host's card names (the pod's
`huawei.com/AscendReal` annotation; the NodeManager checks them at registration with
`pod_annotations_file`, `nodemanager.device_ids`), never container-local indices.
"""
