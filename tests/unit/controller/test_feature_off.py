"""Scale-down off (the default config): the phase reads DISABLED and recovery is the baseline's
whole-instance reconfiguration, with the same bounded retries and serving rules as with it on."""

from __future__ import annotations

import grpc
from .controller_fakes import (
    FakeCoordinator,
    assemble,
    heartbeat_all,
    make_config,
    make_core,
    register_request,
    settle,
    two_pods,
)

from motor.controller.fault_tolerance.evidence import EvidenceKind
from motor.controller.model.runtime import FtPhase
from motor.controller.status import message_json, runtime_proto


def feature_off_core(cluster):
    config = make_config(enable_dp_scale_down=False)
    core, clock = make_core(cluster, config=config)
    return core, clock, config


async def test_failed_reconfigurations_back_off_and_give_up_with_the_feature_off() -> None:
    cluster = two_pods()
    core, clock, config = feature_off_core(cluster)
    await assemble(core, cluster)
    assert core.runtimes.get(7).phase is FtPhase.DISABLED
    cluster.fail[("stop_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    interval = config.fault_tolerance_config.strategy_center_check_interval
    starts: list[float] = []
    for _ in range(200):
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        if core.faults.running(7) is not None:
            starts.append(clock.monotonic())
            await settle(core)
        clock.advance(interval / 4)
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.DISABLED
    assert len(starts) == config.reconfiguration_max_attempts == rt.reconfiguration_attempts
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[0] >= interval and gaps == sorted(gaps) and gaps[-1] >= 4 * gaps[0]
    assert rt.reconfiguration_gave_up and "gave up after" in rt.last_error
    assert len(cluster.named("stop_engines")) == 2 * config.reconfiguration_max_attempts


async def test_a_pod_registering_again_resumes_a_given_up_reconfiguration_with_the_feature_off() -> None:
    cluster = two_pods()
    core, clock, config = feature_off_core(cluster)
    await assemble(core, cluster)
    cluster.fail[("start_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    for _ in range(200):
        heartbeat_all(core, cluster)
        await core.faults.evaluate_all()
        await settle(core)
        clock.advance(config.fault_tolerance_config.strategy_center_check_interval)
    assert core.runtimes.get(7).reconfiguration_gave_up
    del cluster.fail[("start_engines", "*")]
    await core.register(register_request(cluster, "127.0.0.2:1"))
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    await settle(core)
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.DISABLED and rt.reconfiguration_attempts == 0 and not rt.reconfiguration_gave_up
    assert rt.last_error is None and cluster.named("start_engines")[-1][1] in cluster.pods



def can_serve_metric(core) -> float | None:
    return core.metrics.registry.get_sample_value("motor_can_serve", {"instance_id": "7"})


async def test_a_published_instance_can_serve_with_the_feature_off_except_while_reconfiguring() -> None:
    cluster, coord = two_pods(), FakeCoordinator()
    core, clock = make_core(cluster, config=make_config(enable_dp_scale_down=False), coordinator=coord)
    await assemble(core, cluster)
    rt = core.runtimes.get(7)
    assert rt.phase is FtPhase.DISABLED and rt.serving_published
    assert rt.can_serve and can_serve_metric(core) == 1
    assert message_json(runtime_proto(rt))["can_serve"] is True

    cluster.fail[("start_engines", "*")] = grpc.StatusCode.UNAVAILABLE
    core.faults.report_software(7, 1, EvidenceKind.DEAD, "", core.clock.wall())
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    await settle(core)
    assert rt.reconfiguration_attempts == 1 and not rt.can_serve and can_serve_metric(core) == 0
    # The periodic SET does not bring back a view whose engines a failed reconfiguration stopped.
    assert await core.publish_all() == []
    assert coord.view == {} and not rt.can_serve

    del cluster.fail[("start_engines", "*")]
    clock.advance(core.config.reconfiguration_max_backoff_sec)
    heartbeat_all(core, cluster)
    await core.faults.evaluate_all()
    await settle(core)
    assert rt.phase is FtPhase.DISABLED and not rt.reconfiguring
    assert rt.can_serve and can_serve_metric(core) == 1 and coord.view == {7: [0, 1, 2, 3]}
