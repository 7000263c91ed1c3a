"""FtPhase transitions (RFC §3.1), the runtime store, serving projection and can_serve."""

from __future__ import annotations

import itertools

import pytest

from gen.motor.v1 import common_pb2
from motor.controller.fault_tolerance.evidence import (
    EvidenceKind,
    FaultNormalizer,
    Health,
)
from motor.controller.model.runtime import (
    INTERRUPTED_PHASES,
    TRANSACTION_PHASES,
    FtPhase,
    FtRuntimeStore,
    GateResult,
    IllegalTransitionError,
    can_serve,
    serving_ranks,
    transition,
)
from motor.controller.status import message_json, runtime_proto

P = FtPhase
LEGAL = {
    (P.NORMAL, P.DECIDING),
    (P.NORMAL, P.RECONFIGURING),
    (P.DECIDING, P.WAITING_ENGINE_FAULT),
    (P.DECIDING, P.SCALING_DOWN),
    (P.DECIDING, P.RECONFIGURING),
    (P.WAITING_ENGINE_FAULT, P.SCALING_DOWN),
    (P.WAITING_ENGINE_FAULT, P.RECONFIGURING),
    (P.SCALING_DOWN, P.POST_SCALE_CLEANUP),
    (P.SCALING_DOWN, P.RECONFIGURING),
    (P.POST_SCALE_CLEANUP, P.SCALED_DOWN_RUNNING),
    (P.POST_SCALE_CLEANUP, P.RECONFIGURING),
    (P.SCALED_DOWN_RUNNING, P.DECIDING),
    (P.SCALED_DOWN_RUNNING, P.RECONFIGURING),
    (P.RECONFIGURING, P.NORMAL),
    (P.RECONFIGURING, P.RECONFIGURING),
    # Fast recovery by retry: from either serving phase, back to the one it left, or the fallback.
    (P.NORMAL, P.FAST_RECOVERING),
    (P.SCALED_DOWN_RUNNING, P.FAST_RECOVERING),
    (P.FAST_RECOVERING, P.NORMAL),
    (P.FAST_RECOVERING, P.SCALED_DOWN_RUNNING),
    (P.FAST_RECOVERING, P.RECONFIGURING),
    # Elastic scale-up: from the scaled-down phase to every rank back, some still removed, or the
    # planned restoration it falls back to.
    (P.SCALED_DOWN_RUNNING, P.SCALING_UP),
    (P.SCALING_UP, P.NORMAL),
    (P.SCALING_UP, P.SCALED_DOWN_RUNNING),
    (P.SCALING_UP, P.RECONFIGURING),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(FtPhase, FtPhase)))
def test_every_transition_is_exactly_as_drawn(src: FtPhase, dst: FtPhase) -> None:
    if (src, dst) in LEGAL:
        assert transition(src, dst) is dst
    else:
        with pytest.raises(IllegalTransitionError, match=f"{src} -> {dst}"):
            transition(src, dst)


def test_transaction_window_and_restart_rule() -> None:
    assert TRANSACTION_PHASES == {P.DECIDING, P.WAITING_ENGINE_FAULT, P.SCALING_DOWN, P.POST_SCALE_CLEANUP,
                                  P.FAST_RECOVERING, P.SCALING_UP}
    assert P.RECONFIGURING not in TRANSACTION_PHASES
    assert P.SCALED_DOWN_RUNNING not in TRANSACTION_PHASES
    for phase in INTERRUPTED_PHASES:
        assert P.RECONFIGURING in {dst for (src, dst) in LEGAL if src is phase}


@pytest.mark.parametrize(
    ("phase", "published", "expected"),
    [(p, pub, p in (P.NORMAL, P.SCALED_DOWN_RUNNING, P.DISABLED) and pub) for p in FtPhase for pub in (True, False)],
)
def test_can_serve_only_when_servable_and_published(phase: FtPhase, published: bool, expected: bool) -> None:
    assert can_serve(phase, published) is expected


def test_feature_off_cannot_serve_while_a_reconfiguration_is_under_way() -> None:
    store = FtRuntimeStore(scale_down_enabled=False)
    rt = store.create(1, [0, 1], "f")
    store.set_published(1, True)
    assert rt.can_serve
    store.set_phase(1, P.RECONFIGURING)
    assert rt.phase is P.DISABLED and rt.reconfiguring and not rt.can_serve
    store.set_phase(1, P.NORMAL)
    assert rt.phase is P.DISABLED and not rt.reconfiguring and rt.can_serve


def test_serving_excludes_committed_and_pending() -> None:
    assert serving_ranks([0, 1, 2, 3], [1], [3]) == [0, 2]
    assert serving_ranks([0, 1, 2, 3], [], []) == [0, 1, 2, 3]


def test_consecutive_rounds_keep_original_ids() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    rt = store.create(7, [0, 1, 2, 3], "instance_reconfiguration")
    assert rt.phase is P.NORMAL
    for phase in (P.DECIDING, P.SCALING_DOWN, P.POST_SCALE_CLEANUP):
        store.set_phase(7, phase)
    store.begin_round(7, "r1", [1])
    assert rt.alive_dp_ranks == [0, 2, 3] and rt.pending_removed_ranks == {1}
    store.commit_round(7, [1])
    store.set_phase(7, P.SCALED_DOWN_RUNNING)
    assert rt.alive_dp_ranks == [0, 2, 3] and rt.dead_committed == {1} and not rt.pending_removed_ranks
    for phase in (P.DECIDING, P.WAITING_ENGINE_FAULT, P.SCALING_DOWN, P.POST_SCALE_CLEANUP):
        store.set_phase(7, phase)
    store.begin_round(7, "r2", [3])
    store.commit_round(7, [3])
    store.set_phase(7, P.SCALED_DOWN_RUNNING)
    assert rt.alive_dp_ranks == [0, 2]
    assert rt.dead_committed == {1, 3}
    assert rt.original_dp_ranks == (0, 1, 2, 3)
    assert message_json(runtime_proto(rt))["alive_dp_ranks"] == [0, 2]


def test_generation_moves_with_persisted_changes_only() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    rt = store.create(1, [0, 1], "f")
    g = rt.generation
    store.set_gate(1, rt.gate)
    store.record_engine_status(1, 0, common_pb2.EngineFtStatus(id=0, status=common_pb2.ENGINE_HEALTH_HEALTHY))
    store.set_published(1, True)
    assert rt.generation == g
    store.set_phase(1, P.DECIDING)
    assert rt.generation == g + 1


def test_commit_refuses_foreign_or_total_removal() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    store.create(1, [0, 1], "f")
    with pytest.raises(ValueError, match="not original ranks"):
        store.commit_round(1, [5])
    with pytest.raises(ValueError, match="every rank"):
        store.commit_round(1, [0, 1])


def test_pending_cannot_overlap_committed() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    store.create(1, [0, 1, 2], "f", dead_committed=[2])
    with pytest.raises(ValueError, match="overlaps"):
        store.set_pending(1, [2])


def test_feature_off_reads_disabled_whatever_runs() -> None:
    store = FtRuntimeStore(scale_down_enabled=False)
    rt = store.create(1, [0, 1], "f")
    assert rt.phase is P.DISABLED
    store.set_phase(1, P.RECONFIGURING)
    assert rt.phase is P.DISABLED
    assert message_json(runtime_proto(rt))["phase"] == "DISABLED"


def test_clear_history_after_rebuild() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    rt = store.create(1, [0, 1, 2], "f", dead_committed=[1])
    store.begin_round(1, "sd-1", [2])
    store.set_gate(1, GateResult(False, ("EPLB_REQUIRED",)))
    store.clear_history(1, GateResult())
    assert rt.alive_dp_ranks == [0, 1, 2]
    assert rt.request_id == "" and rt.gate == GateResult()


def test_rfc_json_shape() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    rt = store.create(7, [0, 1, 2, 3], "instance_reconfiguration", dead_committed=[1], phase=P.SCALED_DOWN_RUNNING)
    store.set_published(7, True)
    store.begin_round(7, "<scale-down-request-id>", [])
    body = message_json(runtime_proto(rt))
    # RFC §7's example, field for field (plus the generation Motor persists).
    assert body == {
        "instance_id": 7,
        "phase": "SCALED_DOWN_RUNNING",
        "original_dp_ranks": [0, 1, 2, 3],
        "request_id": "<scale-down-request-id>",
        "dead_committed": [1],
        "pending_removed_ranks": [],
        "alive_dp_ranks": [0, 2, 3],
        "fallback_strategy": "instance_reconfiguration",
        "gate": {"allowed": True, "reason_codes": []},
        "engine_statuses": {},
        "serving_published": True,
        "last_error": None,
        "can_serve": True,
        "generation": rt.generation,
        "reconfiguration_attempts": 0,
        "reconfiguration_gave_up": False,
        # Re-inference and the idle-fault probe.
        "migrated_requests": 0,
        "idle_fault_probes": 0,
        # Capacity restoration (nothing asked or due).
        "capacity_restore": "",
        "restore_waiting_for": "",
        "restore_unplaced_ranks": [],
        "restore_request_id": "",
    }


def test_json_page_renders_engine_statuses_and_gate_reasons_without_enum_prefixes() -> None:
    store = FtRuntimeStore(scale_down_enabled=True)
    rt = store.create(7, [0, 1], "f")
    store.set_gate(7, GateResult(False, ("EPLB_REQUIRED",)))
    store.record_engine_status(7, 1, common_pb2.EngineFtStatus(id=1, status=common_pb2.ENGINE_HEALTH_UNHEALTHY,
                                                               fault_info="RuntimeError", mask=[0]))
    store.set_error(7, "boom")
    body = message_json(runtime_proto(rt))
    assert body["gate"] == {"allowed": False, "reason_codes": ["EPLB_REQUIRED"]}
    assert body["engine_statuses"]["1"]["status"] == "UNHEALTHY" and body["engine_statuses"]["1"]["mask"] == [0]
    assert body["engine_statuses"]["1"]["ft_state"] == "UNSPECIFIED" and body["last_error"] == "boom"


def test_normalizer_maps_to_original_rank_and_filters_committed() -> None:
    norm = FaultNormalizer([0, 1, 2, 3])
    ev = norm.normalize(2, EvidenceKind.ENGINE_DEAD, "exit 9", 5.0, dead_committed=[1])
    assert ev is not None and ev.rank == 2 and ev.health is Health.DEAD
    assert norm.normalize(1, EvidenceKind.DEAD, "", 5.0, dead_committed=[1]) is None
    assert norm.normalize(0, EvidenceKind.RECOVERED, "", 5.0, []).health is Health.HEALTHY
    assert norm.normalize(0, EvidenceKind.PROTOCOL_ERROR, "", 5.0, []).health is Health.PROTOCOL_ERROR
    with pytest.raises(ValueError, match="endpoint id 9 is not an original DP rank"):
        norm.normalize(9, EvidenceKind.DEAD, "", 5.0, [])
