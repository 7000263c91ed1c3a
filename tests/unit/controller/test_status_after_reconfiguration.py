"""What the status page shows once a whole-instance reconfiguration succeeded after a refused round:
the instance reads as after assembly, with no request id of a round that is over and the gate of the
capability its pods report now."""

from __future__ import annotations

import grpc
from .controller_fakes import assemble, heartbeat_all, make_core, register_request, settle, two_pods

from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.model.runtime import FtPhase
from motor.controller.status import message_json, runtime_proto


def report_complete_snapshot(core, dead: int) -> None:
    for r in range(4):
        core.faults.report_software(7, r, EvidenceKind.DEAD if r == dead else EvidenceKind.UNHEALTHY, "",
                                    core.clock.wall())


async def recover(core, cluster, clock, turns: int = 20) -> None:
    for _ in range(turns):
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        await settle(core)
        clock.advance(core.config.reconfiguration_max_backoff_sec)


async def test_a_reconfiguration_after_a_gate_refusal_leaves_no_round_request_id_and_the_assembly_gate() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await assemble(core, cluster, redundant=0)
    at_assembly = message_json(runtime_proto(core.runtimes.get(7)))["gate"]
    assert at_assembly == {"allowed": False, "reason_codes": ["EXPERT_REDUNDANCY_REQUIRED"]}
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    report_complete_snapshot(core, dead=1)
    await recover(core, cluster, clock)
    txns = core.timelines.transactions(7)
    assert [t.strategy for t in txns] == ["dp_scale_down", "instance_reconfiguration"]
    assert "gate refused" in txns[0].outcome and txns[1].outcome == "succeeded"
    body = message_json(runtime_proto(core.runtimes.get(7)))
    assert body["phase"] == "NORMAL" and body["request_id"] == "" and body["last_error"] is None
    assert body["gate"] == at_assembly


async def test_a_reconfiguration_shows_the_gate_of_the_capability_the_pods_report_again() -> None:
    cluster = two_pods()
    core, clock = make_core(cluster)
    await core.register(register_request(cluster, "127.0.0.2:1", redundant=8))
    await core.register(register_request(cluster, "127.0.0.3:1", redundant=4))
    assert not core.runtimes.get(7).gate.allowed
    cluster.fault(dead={1}, unhealthy={0, 2, 3})
    report_complete_snapshot(core, dead=1)
    # The fallback's first attempt fails; meanwhile the pod registers again with the capability its
    # peer reports, and the retry rebuilds the instance.
    cluster.fail[("start_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    await core.faults.evaluate_all()
    await settle(core)
    await recover(core, cluster, clock, turns=1)
    assert core.runtimes.get(7).phase is FtPhase.RECONFIGURING and not core.runtimes.get(7).gate.allowed
    del cluster.fail[("start_engines", "*")]
    await core.register(register_request(cluster, "127.0.0.3:1", redundant=8))
    await recover(core, cluster, clock)
    body = message_json(runtime_proto(core.runtimes.get(7)))
    assert body["phase"] == "NORMAL" and body["request_id"] == ""
    assert body["gate"] == {"allowed": True, "reason_codes": []}
