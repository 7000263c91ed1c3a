"""motorctl: look at and poke a Motor deployment.

  motorctl status [--json]            the RFC §7 runtime of every instance
  motorctl watch [--count N]          phase changes as they happen
  motorctl timeline INSTANCE          the last recovery transactions, step by step, with a stage bar
  motorctl timeline INSTANCE --follow each transaction as it finishes (steps and stage bar)
  motorctl instances                  what the Coordinator routes to
  motorctl inject URL FAULT [k=v...]  an engine fault through the reference engine's admin route
  motorctl hw-fault NODE [NPU]        a MindCluster-shaped hardware fault: ReportHardwareFault, or
                                      a mounted-ConfigMap file with --configmap-dir [--via SOURCE]
  motorctl engine-check URL [--prefix P] [--rank N] [--try-retry] [--timeout S]
                                      does an engine's FT API conform to Motor's contract (engine_check)
  motorctl restore INSTANCE [--when-ready] [--deadline S]
                                      capacity restoration back to every original rank (restore)
  motorctl certs init DIR             a development CA, a certificate per role (per pod: --pod NAME=IP)

Synchronous gRPC; addresses from --controller / --coordinator or MOTOR_CONTROLLER /
MOTOR_COORDINATOR. mTLS with --ca/--cert/--key (MOTOR_TLS_CA / MOTOR_TLS_CERT / MOTOR_TLS_KEY), or
--tls-dir DIR (MOTOR_TLS_DIR) for DIR/ca.crt, DIR/operator.crt and DIR/operator.key: the operator
role reads status, timelines and instances and reports hardware faults.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import json_format

from gen.motor.v1 import common_pb2, controller_pb2, controller_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from motor.cli import engine_check, restore
from motor.cli.stage_bar import stage_bar
from motor.common.config.loader import ConfigError, build_config
from motor.common.config.tls import ClientTlsConfig
from motor.common.grpc_server import open_sync_channel
from motor.controller.fault_tolerance.stages import transaction_stages
from motor.sim.client import InjectionError, inject_fault

ChannelFactory = Callable[[str], grpc.Channel]
RPC_TIMEOUT_SEC = 10.0


def _phase(value: int) -> str:
    return controller_pb2.FtPhase.Name(value).removeprefix("FT_PHASE_")


def runtime_json(rt: controller_pb2.InstanceFtRuntime) -> dict[str, Any]:
    """The RFC §7 JSON shape (enum prefixes dropped, every field present)."""
    body = json_format.MessageToDict(rt, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    body["phase"] = _phase(rt.phase)
    body["gate"] = {
        "allowed": rt.gate.allowed,
        "reason_codes": [controller_pb2.GateReason.Name(c).removeprefix("GATE_REASON_") for c in rt.gate.reason_codes],
    }
    body["instance_id"] = rt.instance_id
    body["generation"] = rt.generation
    body["last_error"] = rt.last_error if rt.HasField("last_error") else None
    return body


def _ranks(values: Sequence[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def status_table(resp: controller_pb2.GetFaultToleranceStatusResponse) -> str:
    header = ("INSTANCE", "PHASE", "ALIVE", "DEAD_COMMITTED", "PENDING", "PUBLISHED", "CAN_SERVE", "GATE", "REQUEST_ID", "LAST_ERROR")
    rows = [header]
    for rt in resp.instances:
        gate = "ok" if rt.gate.allowed else ",".join(controller_pb2.GateReason.Name(c).removeprefix("GATE_REASON_") for c in rt.gate.reason_codes)
        rows.append((
            str(rt.instance_id), _phase(rt.phase), _ranks(rt.alive_dp_ranks), _ranks(rt.dead_committed),
            _ranks(rt.pending_removed_ranks), "yes" if rt.serving_published else "no", "yes" if rt.can_serve else "no",
            gate, rt.request_id or "-", rt.last_error if rt.HasField("last_error") else "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _clock(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%H:%M:%S.%f")[:-3] if ts else "-"


def _unicode(out: TextIO) -> bool:
    """Block characters only where the output can encode them (a StringIO or a UTF-8 terminal)."""
    return "utf" in (getattr(out, "encoding", None) or "utf-8").lower()


def timeline_text(instance_id: int, resp: controller_pb2.GetTimelineResponse, unicode: bool = True) -> str:
    lines = []
    for txn in resp.transactions:
        took = f"{txn.ended_at_unix_sec - txn.started_at_unix_sec:.3f}s" if txn.ended_at_unix_sec else "running"
        lines.append(f"instance {instance_id} {txn.strategy} request_id={txn.request_id or '-'} {txn.outcome} ({took})")
        for e in txn.events:
            offset = e.at_unix_sec - txn.started_at_unix_sec
            kind = controller_pb2.TimelineEventKind.Name(e.event_kind).removeprefix("TIMELINE_EVENT_KIND_").lower()
            parts = [f"  +{offset:8.3f}s", f"{kind:<8}", e.name]
            if e.target:
                parts.append(f"-> {e.target}")
            if e.event_kind == controller_pb2.TIMELINE_EVENT_KIND_CALL:
                parts.append(f"[{e.outcome}, {e.duration_sec * 1000:.1f} ms]")
            if e.detail:
                parts.append(e.detail)
            lines.append(" ".join(parts))
        if txn.ended_at_unix_sec and transaction_stages(txn):
            lines += ["  " + line for line in stage_bar(txn, unicode=unicode).splitlines()]
    return "\n".join(lines) if lines else f"instance {instance_id}: no transactions yet"


# Transactions read per wake-up when following: more than finish between two runtime changes.
FOLLOW_LIMIT = 5


def follow_timeline(stub: controller_pb2_grpc.ControllerStub, instance_id: int, count: int, out: TextIO) -> None:
    """Prints each transaction of the instance once it has finished: its steps and its stage bar. Every
    runtime change on the Watch stream (a transaction ends with one) reads the last transactions."""

    def finished() -> list[controller_pb2.Transaction]:
        resp = stub.GetTimeline(controller_pb2.GetTimelineRequest(instance_id=instance_id, limit=FOLLOW_LIMIT),
                                timeout=RPC_TIMEOUT_SEC)
        return [t for t in resp.transactions if t.ended_at_unix_sec]

    printed = {(t.request_id, t.started_at_unix_sec) for t in finished()}
    print(f"instance {instance_id}: following ({len(printed)} earlier transactions not shown; "
          f"motorctl timeline {instance_id} lists them)", file=out, flush=True)
    stream = stub.WatchFaultToleranceStatus(controller_pb2.WatchFaultToleranceStatusRequest(instance_ids=[instance_id]))
    shown = 0
    for _ in stream:
        for txn in finished():
            key = (txn.request_id, txn.started_at_unix_sec)
            if key in printed:
                continue
            printed.add(key)
            print(timeline_text(instance_id, controller_pb2.GetTimelineResponse(transactions=[txn]), _unicode(out)),
                  file=out, flush=True)
            shown += 1
            if count and shown >= count:
                stream.cancel()
                return


def _endpoint_text(e: common_pb2.Endpoint) -> str:
    """``rank@ip:port``, or ``rank@host:port(pinned)`` for a rank reached through its instance's route."""
    if e.HasField("instance_route"):
        return f"{e.id}@{e.instance_route.host}:{e.instance_route.port}(pinned)"
    return f"{e.id}@{e.ip}:{e.business_port}"


def instances_text(resp: coordinator_pb2.ListInstancesResponse) -> str:
    lines = [f"revision {resp.revision}"]
    for p in resp.instances:
        eps = ", ".join(_endpoint_text(e) for e in sorted(p.instance.endpoints, key=lambda e: e.id))
        state = "paused" if p.paused else "routing"
        lines.append(f"instance {p.instance.id} model={p.instance.model} {state}: {eps}")
    return "\n".join(lines)


def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"motorctl: parameter {item!r} is not KEY=VALUE")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def hardware_fault(args: argparse.Namespace, channel_factory: ChannelFactory) -> str:
    from motor.controller.hardware.injection.configmaps import write_configmap_fault, write_nodeinfo_fault
    from motor.controller.hardware.injection.report_request import VIA_DEVICE_INFO, VIA_NODE_INFO, build_report_request
    from motor.controller.hardware.model import HardwareFault, HardwareFaultError

    try:
        req = build_report_request(args.node, args.npu, args.code, args.level, via=args.via)
        if args.configmap_dir:
            fault = HardwareFault.from_request(req, now_sec=datetime.datetime.now().timestamp(), default_source="motorctl")
            if (args.via or (VIA_DEVICE_INFO if args.npu else VIA_NODE_INFO)) == VIA_NODE_INFO:
                folder = write_nodeinfo_fault(args.configmap_dir, args.node, [fault])
            else:
                folder = write_configmap_fault(args.configmap_dir, args.node, [fault], resource=args.resource)
            return f"wrote {folder}"
    except HardwareFaultError as exc:
        raise SystemExit(f"motorctl hw-fault: {exc}") from None
    with channel_factory(args.controller) as ch:
        resp = controller_pb2_grpc.ControllerStub(ch).ReportHardwareFault(req, timeout=RPC_TIMEOUT_SEC)
    return resp.message


def certs(args: argparse.Namespace) -> str:
    from motor.common.pki import PkiError, create_dev_pki, parse_pod

    try:
        pods = [parse_pod(p) for p in args.pod]
        pki = create_dev_pki(args.directory, args.host or ["localhost", "127.0.0.1"], days=args.days,
                             force=args.force, pods=pods, trust_domain=args.trust_domain, namespace=args.namespace)
    except (PkiError, OSError) as exc:
        raise SystemExit(f"motorctl certs init: {exc}") from None
    return "\n".join(str(p) for p in pki.files([name for name, _ in pods]))


def client_tls_from_args(args: argparse.Namespace) -> ClientTlsConfig | None:
    """--ca/--cert/--key, else --tls-dir (operator certificate); none of them: plaintext."""
    ca, cert, key = args.ca, args.cert, args.key
    if args.tls_dir and not (ca or cert or key):
        folder = Path(args.tls_dir)
        ca, cert, key = folder / "ca.crt", folder / "operator.crt", folder / "operator.key"
    if not (ca or cert or key):
        return None
    try:
        return build_config(ClientTlsConfig, {"ca_file": ca, "cert_file": cert, "key_file": key}, "tls")
    except ConfigError as exc:
        raise SystemExit(f"motorctl: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="motorctl", description="Look at and poke a Motor deployment.")
    parser.add_argument("--controller", default=os.environ.get("MOTOR_CONTROLLER", "127.0.0.1:50051"))
    parser.add_argument("--coordinator", default=os.environ.get("MOTOR_COORDINATOR", "127.0.0.1:50052"))
    parser.add_argument("--ca", default=os.environ.get("MOTOR_TLS_CA"), help="CA of the servers (mTLS)")
    parser.add_argument("--cert", default=os.environ.get("MOTOR_TLS_CERT"), help="client certificate (operator role)")
    parser.add_argument("--key", default=os.environ.get("MOTOR_TLS_KEY"), help="client key")
    parser.add_argument("--tls-dir", default=os.environ.get("MOTOR_TLS_DIR"),
                        help="folder with ca.crt, operator.crt, operator.key (e.g. from `motorctl certs init`)")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="fault-tolerance runtime of every instance")
    status.add_argument("--json", action="store_true", help="raw RFC §7 JSON")
    status.add_argument("instance_ids", nargs="*", type=int)
    watch = sub.add_parser("watch", help="phase changes as they happen")
    watch.add_argument("--count", type=int, default=0, help="stop after N changes (0: until interrupted)")
    watch.add_argument("instance_ids", nargs="*", type=int)
    tl = sub.add_parser("timeline", help="last transactions of an instance, stage by stage")
    tl.add_argument("instance_id", type=int)
    tl.add_argument("--limit", type=int, default=0)
    tl.add_argument("--json", action="store_true")
    tl.add_argument("--follow", action="store_true", help="print each transaction as it finishes, until interrupted")
    tl.add_argument("--count", type=int, default=0, help="with --follow: stop after N transactions (0: never)")
    sub.add_parser("instances", help="what the Coordinator routes to")
    inj = sub.add_parser("inject", help="engine fault through the reference engine's admin route")
    inj.add_argument("engine_url", help="e.g. http://127.0.0.2:8001")
    inj.add_argument("fault", help="kill_process, executor_death, hang_status, unhealthy, fail_next_apply, ...")
    inj.add_argument("params", nargs="*", help="KEY=VALUE (JSON values)")
    hw = sub.add_parser("hw-fault", help="report a hardware fault (RPC, or a ConfigMap file)")
    hw.add_argument("node", help="node name, e.g. node-127.0.0.2")
    hw.add_argument("npu", nargs="?", default="",
                    help="card as the device plugin names it: Ascend910-1, npu-1 (A5), Ascend310P-V-1, a vNPU "
                         "Ascend910-2c-100-1, a share slice Ascend910-1-0 (omit: the whole node)")
    hw.add_argument("--level", default="L6",
                    help="L1..L6 or any MindCluster level name: SeparateNPU, RestartNPU, ... (device plugin), "
                         "Separate, PreSeparate, ... (switch), SeparateFault, ... (NodeD) (default L6)")
    hw.add_argument("--code", default="80E18402", help="fault code(s), comma-joined hex")
    hw.add_argument("--via", choices=["deviceinfo", "switch", "nodeinfo"],
                    help="the publishing source: deviceinfo (a card; default with NPU), switch (the node's "
                         "SwitchInfoCfg) or nodeinfo (NodeD; default without NPU)")
    hw.add_argument("--resource", help="with --configmap-dir: the DeviceList resource (default from the card name: "
                                       "huawei.com/npu for npu-*, else huawei.com/Ascend910, ...)")
    hw.add_argument("--configmap-dir",
                    help="write the ConfigMap here (mindx-dl-deviceinfo-<node>, or mindx-dl-nodeinfo-<node> for "
                         "NodeD) instead of calling the RPC")
    engine_check.add_parser(sub)
    restore.add_parser(sub)
    ce = sub.add_parser("certs", help="development certificates")
    ce_sub = ce.add_subparsers(dest="certs_command", required=True)
    init = ce_sub.add_parser("init", help="a CA and one certificate per role (keys 0600) into DIR")
    init.add_argument("directory", help="where to write ca.crt, <role>.crt/.key, etcd.crt/.key")
    init.add_argument("--host", action="append", default=[],
                      help="DNS name or IP in every certificate's SANs (repeatable; default localhost, 127.0.0.1)")
    init.add_argument("--pod", action="append", default=[], metavar="NAME=IP",
                      help="a NodeManager certificate of its own for this pod (repeatable): its pod URI and IP "
                           "only; with any --pod there is no shared nodemanager.crt")
    init.add_argument("--trust-domain", default="motor", help="SPIFFE trust domain of the pod URIs (default motor)")
    init.add_argument("--namespace", default="motor", help="namespace in the pod URIs (default motor)")
    init.add_argument("--days", type=int, default=7, help="validity in days (default 7, at most 90)")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    return parser


def run(argv: Sequence[str] | None = None, out: TextIO = sys.stdout,
        channel_factory: ChannelFactory | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "engine-check":
        return engine_check.run(args, out, sys.stderr)
    if args.command == "certs":
        print(certs(args), file=out)
        return 0
    if channel_factory is None:
        tls = client_tls_from_args(args)

        def channel_factory(address: str) -> grpc.Channel:
            return open_sync_channel(address, tls)
    try:
        if args.command == "status":
            with channel_factory(args.controller) as ch:
                resp = controller_pb2_grpc.ControllerStub(ch).GetFaultToleranceStatus(
                    controller_pb2.GetFaultToleranceStatusRequest(instance_ids=args.instance_ids), timeout=RPC_TIMEOUT_SEC)
            lead = resp.leadership
            if args.json:
                doc: dict = {"instances": [runtime_json(r) for r in resp.instances]}
                if lead.election_enabled:
                    doc["leadership"] = json_format.MessageToDict(lead, preserving_proto_field_name=True,
                                                                  always_print_fields_with_no_presence=True)
                print(json.dumps(doc, indent=2), file=out)
            else:
                print(status_table(resp), file=out)
                if lead.election_enabled:
                    # Replicas: who answered, and who leads (a standby reports what the leader persisted).
                    print(f"controller {lead.replica_id} ({'leader' if lead.is_leader else 'standby'}); leader "
                          f"{lead.leader_id or 'unknown'} at {lead.leader_address or '-'} (term {lead.term})", file=out)
        elif args.command == "watch":
            with channel_factory(args.controller) as ch:
                stream = controller_pb2_grpc.ControllerStub(ch).WatchFaultToleranceStatus(
                    controller_pb2.WatchFaultToleranceStatusRequest(instance_ids=args.instance_ids))
                last: dict[int, tuple[int, tuple[int, ...]]] = {}
                seen = 0
                for change in stream:
                    rt = change.runtime
                    key = (rt.phase, tuple(rt.alive_dp_ranks))
                    if last.get(rt.instance_id) == key:
                        continue
                    last[rt.instance_id] = key
                    print(f"{_clock(change.changed_at_unix_sec)} instance {rt.instance_id} {_phase(rt.phase)} "
                          f"alive={_ranks(rt.alive_dp_ranks)} dead_committed={_ranks(rt.dead_committed)}", file=out, flush=True)
                    seen += 1
                    if args.count and seen >= args.count:
                        stream.cancel()
                        break
        elif args.command == "timeline" and args.follow:
            with channel_factory(args.controller) as ch:
                follow_timeline(controller_pb2_grpc.ControllerStub(ch), args.instance_id, args.count, out)
        elif args.command == "timeline":
            with channel_factory(args.controller) as ch:
                resp = controller_pb2_grpc.ControllerStub(ch).GetTimeline(
                    controller_pb2.GetTimelineRequest(instance_id=args.instance_id, limit=args.limit), timeout=RPC_TIMEOUT_SEC)
            print(json_format.MessageToJson(resp, preserving_proto_field_name=True) if args.json
                  else timeline_text(args.instance_id, resp, _unicode(out)), file=out)
        elif args.command == "instances":
            with channel_factory(args.coordinator) as ch:
                resp = coordinator_pb2_grpc.CoordinatorStub(ch).ListInstances(
                    coordinator_pb2.ListInstancesRequest(), timeout=RPC_TIMEOUT_SEC)
            print(instances_text(resp), file=out)
        elif args.command == "inject":
            try:
                answer = inject_fault(args.engine_url, args.fault, _parse_params(args.params))
            except InjectionError as exc:
                raise SystemExit(f"motorctl inject: {exc}") from None
            print(json.dumps(answer), file=out)
        elif args.command == "hw-fault":
            print(hardware_fault(args, channel_factory), file=out)
        elif args.command == "restore":
            return restore.run(args, channel_factory, out)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.CANCELLED and (args.command == "watch" or getattr(args, "follow", False)):
            return 0
        print(f"motorctl {args.command}: {code.name if code else 'ERROR'}: {details}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
