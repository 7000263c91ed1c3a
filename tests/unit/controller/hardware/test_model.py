"""HardwareFault: identity, code normalisation, and the ReportHardwareFault conversion."""

from __future__ import annotations

import math

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.hardware import levels
from motor.controller.hardware.model import HardwareFault, HardwareFaultError, normalize_fault_codes

NOW = 1_760_000_000.0


def _req(**kw) -> controller_pb2.ReportHardwareFaultRequest:
    base = dict(node_name="worker-7", npu_name="Ascend910-3", fault_code="80E18402", level=controller_pb2.FAULT_LEVEL_L6,
                fault_type="CardUnhealthy", fault_handling="SeparateNPU", fault_time_unix_sec=1_759_999_990.5, source="motorctl")
    base.update(kw)
    return controller_pb2.ReportHardwareFaultRequest(**base)


def test_codes_are_normalised() -> None:
    assert normalize_fault_codes(" a8028801,80E18402 ,, 0x80e18402") == (("80E18402", "A8028801"), [])
    assert normalize_fault_codes("heartbeatTimeOut") == (("heartbeatTimeOut",), [])
    assert normalize_fault_codes("Disconnected,81078603") == (("81078603", "Disconnected"), [])
    assert normalize_fault_codes("") == ((), [])
    codes, problems = normalize_fault_codes("80E18402;80C98009,x y")
    assert codes == () and len(problems) == 2 and "'80E18402;80C98009'" in problems[0]


def test_key_separates_cards_and_nodes_with_one_code() -> None:
    a = HardwareFault("n1", "Ascend910-1", ("80CB8002",), levels.L5)
    b = HardwareFault("n1", "Ascend910-5", ("80CB8002",), levels.L5)
    c = HardwareFault("n2", "Ascend910-1", ("80CB8002",), levels.L5)
    assert len({a.key, b.key, c.key}) == 3
    assert a.key == (("80CB8002",), "Ascend910-1", "n1")


def test_request_round_trip() -> None:
    fault = HardwareFault.from_request(_req(fault_code="80e18402,A8028801"), now_sec=NOW)
    assert fault == HardwareFault("worker-7", "Ascend910-3", ("80E18402", "A8028801"), levels.L6, "CardUnhealthy",
                                  "SeparateNPU", 1_759_999_990.5, "motorctl")
    assert fault.severe and not fault.whole_node
    back = fault.to_request()
    assert back.fault_code == "80E18402,A8028801"
    assert HardwareFault.from_request(back, now_sec=NOW) == fault


def test_zero_time_means_now_and_empty_source_means_rpc() -> None:
    fault = HardwareFault.from_request(_req(fault_time_unix_sec=0.0, source=""), now_sec=NOW)
    assert fault.fault_time_unix_sec == NOW and fault.source == "rpc"


def test_node_fault_without_card_or_code() -> None:
    fault = HardwareFault.from_request(_req(npu_name="", fault_code="", fault_handling="", fault_type="NodeUnhealthy"), now_sec=NOW)
    assert fault.whole_node and fault.fault_codes == () and fault.key == ((), "", "worker-7")


def test_unknown_handling_text_is_kept_the_level_decides() -> None:
    fault = HardwareFault.from_request(_req(fault_handling="FutureHandlingNPU", level=controller_pb2.FAULT_LEVEL_L3), now_sec=NOW)
    assert (fault.level, fault.fault_handling) == (levels.L3, "FutureHandlingNPU")


def test_unknown_card_format_is_accepted_here() -> None:
    # Format is the resolver's call (not guessed there), not a reason to refuse the report.
    assert HardwareFault.from_request(_req(npu_name="npu-3"), now_sec=NOW).npu_name == "npu-3"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"level": controller_pb2.FAULT_LEVEL_UNSPECIFIED}, "level=FAULT_LEVEL_UNSPECIFIED"),
        ({"level": 9}, "level=9"),
        ({"node_name": ""}, "node_name=''"),
        ({"node_name": " worker-7"}, "surrounding spaces"),
        ({"fault_code": "80E18402;1"}, "fault_code='80E18402;1'"),
        ({"fault_time_unix_sec": -1.0}, "fault_time_unix_sec=-1.0"),
        ({"fault_time_unix_sec": math.nan}, "fault_time_unix_sec=nan"),
    ],
)
def test_bad_requests_are_refused_naming_the_value(change, needle) -> None:
    with pytest.raises(HardwareFaultError) as info:
        HardwareFault.from_request(_req(**change), now_sec=NOW)
    assert needle in str(info.value)


def test_the_dataclass_itself_refuses_bad_values() -> None:
    with pytest.raises(HardwareFaultError, match="level=L0|level=FAULT_LEVEL_UNSPECIFIED"):
        HardwareFault("n", "", (), 0)
    with pytest.raises(HardwareFaultError, match="node_name"):
        HardwareFault("", "", (), levels.L1)
    with pytest.raises(HardwareFaultError, match="fault_codes"):
        HardwareFault("n", "", ["80E18402"], levels.L1)  # type: ignore[arg-type]
    with pytest.raises(HardwareFaultError, match="fault_time_unix_sec"):
        HardwareFault("n", "", (), levels.L1, fault_time_unix_sec=math.inf)


def test_describe() -> None:
    text = HardwareFault("n1", "", ("NodeNotReady",), levels.L6, "NodeUnhealthy", source="k8s").describe()
    assert text == "node=n1 npu=<node> codes=NodeNotReady level=L6 handling=- type=NodeUnhealthy source=k8s"
