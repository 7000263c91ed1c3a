"""The FT proxy over an instance-level dialect (SGLang's manager), with a scripted bridge: one apply
per round from the lowest survivor's pod, a busy manager asked again within the deadline, this
round's ranks only after a committed round, and status entries read from the one document."""

from __future__ import annotations

import json

import pytest

from gen.motor.v1 import node_manager_pb2
from nodemanager.config import NodeManagerConfig
from nodemanager.dialects import make_dialect
from nodemanager.engine_http import ApplyOutcome, EngineAddress
from nodemanager.ft_proxy import FtProxy
from nodemanager.guard import GuardState
from nodemanager.pod_state import PodState

MANAGER = ("127.0.0.80", 30000)


class Bridge:
    """EngineHttpClient's interface with scripted apply answers and one instance document."""

    def __init__(self) -> None:
        self.dialect = make_dialect("sglang", 4, MANAGER)
        self.answers: list[tuple[int, bytes]] = []
        self.sent: list[tuple[EngineAddress, str]] = []
        self.document = {"schema_version": 1, "total_engines": 4, "engines": [
            {"id": r, "status": s} for r, s in enumerate(["unhealthy", "dead", "unhealthy", "unhealthy"])]}

    async def read_status(self, addr: EngineAddress, timeout_sec=None, request_id: str = ""):
        assert (addr.host, addr.port) == MANAGER
        return self.dialect.parse_status(addr.endpoint_id, 200, json.dumps(self.document).encode(), 0.0, request_id)

    async def apply(self, addr: EngineAddress, body: str, timeout_sec=None) -> ApplyOutcome:
        self.sent.append((addr, body))
        status, raw = self.answers.pop(0) if self.answers else (202, b'{"message": "ok", "request_id": "x"}')
        answer = self.dialect.parse_apply_answer(status, raw)
        return ApplyOutcome(addr.endpoint_id, answer.accepted, status, answer.engine_request_id, answer.message, body,
                            busy=answer.busy)


class Supervisor:
    def __init__(self, ids: list[int]) -> None:
        self.ids, self.headless_ids = ids, []

    def address(self, i: int) -> EngineAddress | None:
        return EngineAddress(i, "127.0.0.81", 8000 + i) if i in self.ids else None


def pod(ranks: list[int], bridge: Bridge) -> FtProxy:
    cfg = NodeManagerConfig.model_validate({
        "controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 4, "pod_ip": "127.0.0.81",
        "engines": [{"dp_rank": r} for r in ranks], "engine_ft_dialect": "sglang",
        "engine_ft_manager_address": "127.0.0.80:30000"})
    return FtProxy(cfg, PodState(7, proxy_enabled=True), Supervisor(ranks), bridge,  # type: ignore[arg-type]
                   GuardState(lambda: 0.0), on_commit=lambda *_: None)


async def apply(proxy: FtProxy, rid: str, removed: list[int], ids: list[int], master: int):
    proxy.guard(rid, 60, 7)
    return await proxy.apply(instance_id=7, request_id=rid, instruction=node_manager_pb2.INSTRUCTION_SCALE_DOWN,
                             removed_dp_ranks=removed, dp_master_ip="127.0.0.81", dp_master_rank=master,
                             endpoint_ids=ids, timeout_sec=5.0)


def test_sglang_without_a_manager_address_is_refused_at_config_time() -> None:
    with pytest.raises(ValueError, match="engine_ft_dialect=sglang needs engine_ft_manager_address"):
        NodeManagerConfig.model_validate({"controller_address": "127.0.0.1:1", "instance_id": 7, "dp_size": 4,
                                          "engines": [{"dp_rank": 0}], "engine_ft_dialect": "sglang"})


async def test_one_apply_per_round_from_the_lowest_survivors_pod_and_only_this_rounds_ranks() -> None:
    bridge = Bridge()
    first, second = pod([0, 1], bridge), pod([2, 3], bridge)
    a = await apply(first, "r1", [1], [0], 0)
    b = await apply(second, "r1", [1], [2, 3], 0)
    assert a.accepted and b.accepted and b.outcomes == []
    assert [(addr.endpoint_id, json.loads(body)) for addr, body in bridge.sent] == [
        (0, {"instruction": "scale_down", "params": {"removed_dp_ranks": [1]}, "request_id": "r1"})]
    for proxy, retired in ((first, [1]), (second, [])):
        proxy.finalize(instance_id=7, request_id="r1", commit=True, retired_ids=retired)
    bridge.sent.clear()
    # Rank 0 dies next: rank 2 is the lowest survivor, and the manager is told rank 0 only.
    assert (await apply(second, "r2", [0, 1], [2, 3], 2)).accepted
    assert [json.loads(body)["params"] for _, body in bridge.sent] == [{"removed_dp_ranks": [0]}]


async def test_a_busy_manager_is_asked_again_within_the_deadline() -> None:
    bridge = Bridge()
    busy = (409, b'{"message": "ft_operation_in_progress"}')
    bridge.answers = [busy, busy]
    result = await apply(pod([0, 1], bridge), "r1", [1], [0], 0)
    assert result.accepted and len(bridge.sent) == 3
    assert {body for _, body in bridge.sent} == {bridge.sent[0][1]}  # the same request each time


async def test_a_refusal_is_quoted_and_never_sent_again() -> None:
    bridge = Bridge()
    bridge.answers = [(400, b'{"message": "\'removed_dp_ranks\' contains a rank out of range."}')]
    result = await apply(pod([0, 1], bridge), "r1", [1], [0], 0)
    assert not result.accepted and len(bridge.sent) == 1
    assert result.outcomes[0].message == "HTTP 400: 'removed_dp_ranks' contains a rank out of range."


async def test_status_reads_each_rank_from_the_instance_document_with_the_rounds_error() -> None:
    bridge = Bridge()
    bridge.document.update(last_ft_request_id="r1", ft_error="cannot_scale_down_all_expected_ranks")
    entries = await pod([2, 3], bridge).status(7, [3, 2], request_id="r1")
    assert [(e.id, e.status, e.ft_state, e.ft_error) for e in entries] == [
        (3, "unhealthy", "failed", "cannot_scale_down_all_expected_ranks"),
        (2, "unhealthy", "failed", "cannot_scale_down_all_expected_ranks")]
