"""Renders one engine pod's motor-nodemanager config (the engine StatefulSet's init container).

The template (config/nodemanager.yaml) holds what every pod of the instance shares; this adds what
only the pod knows, from its environment (downward API):

  MOTOR_POD_INDEX          the pod's ordinal (label apps.kubernetes.io/pod-index; LWS_WORKER_INDEX in a
                           LeaderWorkerSet): the pod hosts DP ranks index*R .. index*R + R-1
  MOTOR_RANKS_PER_POD      R, the DP ranks (engine processes) of one pod
  MOTOR_POD_IP             pod_ip (status.podIP); the engines bind it
  MOTOR_ADVERTISE_HOST     advertise_host, optional: the pod's DNS name the Controller dials
  MOTOR_NODE_NAME          node_name (spec.nodeName): MindCluster's faults are per node
  MOTOR_DP_MASTER_HOST     the pod of rank 0 (DNS name or IP); pod 0 uses its own IP
  MOTOR_ENGINE_BASE_PORT   engine i of the pod listens on base + i (0: a free port each)
  MOTOR_POD_ANNOTATIONS_FILE  the pod's annotations as the downward API writes them (default
                           /etc/motor/podinfo/annotations). Its cards, read as the NodeManager's
                           registration check reads them (nodemanager.device_ids: huawei.com/AscendReal,
                           else huawei.com/Ascend910 / npu / <resource>), are split in card order among
                           the pod's engines as their device_infos. None there: engines without devices.
  MOTOR_DEVICES_PER_POD    the cards the pod requests (0 or unset: none expected). Set, the render waits
                           up to MOTOR_DEVICE_WAIT_SEC (default 300) for the device plugin's
                           huawei.com/AscendReal with that many cards, then takes the allocation
                           annotation; fewer cards than that: status 2.
  MOTOR_RESOLVE_TIMEOUT_SEC  how long to wait for MOTOR_DP_MASTER_HOST to resolve (default 600)

Exit status 2 with one line naming the variable on a bad value; the NodeManager itself validates the
rest when it starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from nodemanager.device_ids import REAL_ANNOTATION, parse_downward_annotations, pod_cards


class RenderError(ValueError):
    pass


def _int_env(env: dict[str, str], name: str, default: int | None = None, minimum: int = 0) -> int:
    text = env.get(name, "").strip()
    if not text:
        if default is None:
            raise RenderError(f"{name} is not set")
        return default
    try:
        value = int(text)
    except ValueError:
        raise RenderError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise RenderError(f"{name}={value} is below {minimum}")
    return value


def _card_order(name: str) -> tuple[str, int, str]:
    """'Ascend910-10' after 'Ascend910-9': by prefix, then the number after the last '-'."""
    prefix, _, number = name.rpartition("-")
    return (prefix, int(number), "") if number.isdigit() else (name, -1, name)


def pod_devices(annotations_text: str) -> tuple[str, list[str]]:
    """(annotation used, the pod's cards in card order) from the downward API annotations file."""
    annotations, _ = parse_downward_annotations(annotations_text)
    used, cards = pod_cards(annotations)
    return used, sorted(cards, key=_card_order)


def wait_devices(read, expected: int, timeout_sec: float, sleep=time.sleep) -> list[str]:
    """The pod's cards: with `expected` > 0, waits (bounded) for the device plugin's AscendReal list
    of that many cards, then accepts the allocation annotation; 0: whatever is there now."""
    deadline = time.monotonic() + timeout_sec
    while True:
        used, cards = pod_devices(read())
        if expected == 0 or (used == REAL_ANNOTATION and len(cards) >= expected):
            return cards
        if time.monotonic() >= deadline:
            if len(cards) >= expected:
                return cards
            raise RenderError(f"MOTOR_DEVICES_PER_POD={expected}: the pod's annotations list {len(cards)} cards "
                              f"({used or 'no card annotation'}: {','.join(cards)!r}) after {timeout_sec:g}s")
        sleep(2.0)


def resolve(host: str, timeout_sec: float, sleep=time.sleep, lookup=socket.getaddrinfo) -> str:
    """An IP of `host`, waiting until it resolves (rank 0's pod may not have its address yet)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    deadline = time.monotonic() + timeout_sec
    while True:
        try:
            infos = lookup(host, None, type=socket.SOCK_STREAM)
            if infos:
                return str(infos[0][4][0])
            error = "no address"
        except OSError as exc:
            error = str(exc)
        if time.monotonic() >= deadline:
            raise RenderError(f"MOTOR_DP_MASTER_HOST={host!r} did not resolve within {timeout_sec:g}s: {error}")
        sleep(1.0)


def render(template: dict[str, Any], env: dict[str, str], devices: list[str],
           resolve_host=resolve) -> dict[str, Any]:
    index = _int_env(env, "MOTOR_POD_INDEX")
    per_pod = _int_env(env, "MOTOR_RANKS_PER_POD", minimum=1)
    base_port = _int_env(env, "MOTOR_ENGINE_BASE_PORT", default=0)
    pod_ip = env.get("MOTOR_POD_IP", "").strip()
    if not pod_ip:
        raise RenderError("MOTOR_POD_IP is not set")
    dp_size = template.get("dp_size")
    if not isinstance(dp_size, int) or (index + 1) * per_pod > dp_size:
        raise RenderError(f"MOTOR_POD_INDEX={index} with MOTOR_RANKS_PER_POD={per_pod} needs ranks up to "
                          f"{(index + 1) * per_pod - 1}, beyond dp_size={dp_size!r} of the template")
    if base_port and base_port + per_pod - 1 > 65535:
        raise RenderError(f"MOTOR_ENGINE_BASE_PORT={base_port} leaves no room for {per_pod} engine ports")
    if devices and len(devices) % per_pod:
        raise RenderError(f"the pod's cards {','.join(devices)!r}: {len(devices)} do not split evenly among "
                          f"{per_pod} engines")
    share = len(devices) // per_pod
    engines = []
    for i in range(per_pod):
        engine: dict[str, Any] = {"dp_rank": index * per_pod + i, "port": base_port + i if base_port else 0}
        if devices:
            engine["device_infos"] = [{"device_id": d} for d in devices[i * share:(i + 1) * share]]
        engines.append(engine)
    out = dict(template)
    out["pod_ip"] = pod_ip
    if env.get("MOTOR_ADVERTISE_HOST", "").strip():
        # The pod's DNS name: what its own certificate covers when it has no IP SAN.
        out["advertise_host"] = env["MOTOR_ADVERTISE_HOST"].strip()
    if env.get("MOTOR_NODE_NAME", "").strip():
        out["node_name"] = env["MOTOR_NODE_NAME"].strip()
    out["engines"] = engines
    if index == 0:
        out["dp_master_ip"] = pod_ip
    else:
        host = env.get("MOTOR_DP_MASTER_HOST", "").strip()
        if not host:
            raise RenderError("MOTOR_DP_MASTER_HOST is not set (pods other than 0 need rank 0's pod)")
        timeout = float(_int_env(env, "MOTOR_RESOLVE_TIMEOUT_SEC", default=600))
        out["dp_master_ip"] = resolve_host(host, timeout)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        template = yaml.safe_load(args.template.read_text()) or {}
        if not isinstance(template, dict):
            raise RenderError(f"{args.template} does not hold a mapping")
        annotations = Path(env.get("MOTOR_POD_ANNOTATIONS_FILE", "/etc/motor/podinfo/annotations"))
        devices = wait_devices(lambda: annotations.read_text() if annotations.is_file() else "",
                               _int_env(env, "MOTOR_DEVICES_PER_POD", default=0),
                               float(_int_env(env, "MOTOR_DEVICE_WAIT_SEC", default=300)))
        config = render(template, env, devices)
    except (RenderError, OSError, yaml.YAMLError) as exc:
        print(f"render_nodemanager: {exc}", file=sys.stderr)
        return 2
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, args.out)
    ranks = [e["dp_rank"] for e in config["engines"]]
    print(f"render_nodemanager: pod {config['pod_ip']} ranks {ranks} dp_master_ip {config['dp_master_ip']} "
          f"devices {[d['device_id'] for e in config['engines'] for d in e.get('device_infos', [])]} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
