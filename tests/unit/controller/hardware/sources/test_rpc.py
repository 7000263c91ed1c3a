"""RpcSource: what the ReportHardwareFault servicer calls."""

from __future__ import annotations

import pytest

from gen.motor.v1 import controller_pb2
from motor.controller.hardware.injection.report_request import build_report_request
from motor.controller.hardware.model import HardwareFaultError
from motor.controller.hardware.sources.rpc import RpcSource, SourceNotStarted

from ..support import Sink


async def test_rpc_source_validates_and_delivers() -> None:
    sink = Sink()
    source = RpcSource(clock=lambda: 1760000500.0)
    with pytest.raises(SourceNotStarted, match="not running"):
        await source.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))
    await source.start(sink)
    fault = await source.report(build_report_request("node-a", "Ascend910-2", "80E18402", "L6"))
    assert sink.batches == [[fault]]
    assert fault.fault_time_unix_sec == 1760000500.0 and fault.source == "motorctl"
    bad = controller_pb2.ReportHardwareFaultRequest(node_name="node-a", npu_name="Ascend910-2", level=0)
    with pytest.raises(HardwareFaultError, match="level=FAULT_LEVEL_UNSPECIFIED"):
        await source.report(bad)
    assert len(sink.batches) == 1
