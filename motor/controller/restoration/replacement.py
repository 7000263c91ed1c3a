"""A pod recreated by its orchestrator (MindCluster replaced the node) registers at a new address
for ranks the Controller retired: it replaces the pod it stands for, so a restoration can place
those ranks on it. Never a protocol error, never a reconfiguration by itself: its ranks come
registered retired (the NodeManager's `replacement_pod`) and stay so until a restoration starts them.
"""

from __future__ import annotations

import logging
from typing import Any

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.strategy.base import ControllerDeps
from motor.controller.persistence import StoreError

log = logging.getLogger(__name__)


def replacement_rule(deps: ControllerDeps, instance_id: int) -> dict[str, Any]:
    """InstanceRegistry.register's arguments that decide a replacement: the ranks committed dead, and
    how long the replaced pod must have been silent (a heartbeating pod is never replaced)."""
    runtime = deps.runtimes.find(instance_id)
    return {"dead_committed": runtime.dead_committed if runtime is not None else frozenset(),
            "silent_for_sec": deps.config.heartbeat_timeout_sec}


async def note_replacement(deps: ControllerDeps, instance_id: int, req: controller_pb2.RegisterRequest,
                           pods_before: set[str]) -> None:
    """After a registration: when it replaced a pod, the new topology is persisted (a restarted
    Controller addresses the replacement) and the log says which pod it stands for."""
    record = deps.registry.get(instance_id)
    if deps.runtimes.find(instance_id) is None or record is None or req.pod.pod_ip in pods_before:
        return
    gone = sorted(pods_before - set(record.pods))
    if not gone:
        return
    log.warning("instance=%d pod=%s replaces pod %s: its ranks %s stay retired until a restoration starts them",
                instance_id, req.pod.pod_ip, ", ".join(gone), sorted(e.id for e in req.endpoints))
    deps.runtimes.touch(instance_id)
    try:
        await deps.persist(instance_id)
    except StoreError as exc:
        deps.runtimes.set_error(instance_id, f"persisting runtime failed: {exc}")
    deps.changed(instance_id)
