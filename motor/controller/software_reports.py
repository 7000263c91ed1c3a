"""Software fault reports as the Controller takes them: one (ReportSoftwareFault) or several of one
pod in one call (ReportSoftwareFaults). The servicer maps what is raised here to status codes; the
simulation's transport takes reports through the same functions."""

from __future__ import annotations

from gen.motor.v1 import controller_pb2
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.evidence import EvidenceKind, NormalizationError

KINDS = {
    controller_pb2.SOFTWARE_FAULT_KIND_UNHEALTHY: EvidenceKind.UNHEALTHY,
    controller_pb2.SOFTWARE_FAULT_KIND_DEAD: EvidenceKind.DEAD,
    controller_pb2.SOFTWARE_FAULT_KIND_ENGINE_DEAD: EvidenceKind.ENGINE_DEAD,
    controller_pb2.SOFTWARE_FAULT_KIND_PROTOCOL_ERROR: EvidenceKind.PROTOCOL_ERROR,
    controller_pb2.SOFTWARE_FAULT_KIND_RECOVERED: EvidenceKind.RECOVERED,
}


class ReportInvalid(ValueError):
    """A report, or a call of reports, that can never be taken as it is (INVALID_ARGUMENT)."""


def take(core: ControllerCore,
         req: controller_pb2.ReportSoftwareFaultRequest) -> controller_pb2.ReportSoftwareFaultResponse:
    """Records one report. Raises ReportInvalid, or UnknownInstanceError (NOT_FOUND: the instance is
    not assembled yet, and the NodeManager holds the report)."""
    kind = KINDS.get(req.kind)
    if kind is None:
        raise ReportInvalid(f"kind {req.kind} is not a software fault kind")
    try:
        message = core.report_software_fault(req, kind)
    except NormalizationError as exc:
        raise ReportInvalid(f"instance {req.instance_id}: {exc}") from None
    return controller_pb2.ReportSoftwareFaultResponse(accepted=not message.endswith("ignored"), message=message)


def one_pod(req: controller_pb2.ReportSoftwareFaultsRequest) -> tuple[int, str]:
    """The instance and pod every report of the call is of; ReportInvalid unless there is exactly one
    (how many reports a call may carry is a bound `motor.common.validation` checks)."""
    if not req.reports:
        raise ReportInvalid("reports: a call carries at least one report")
    first = req.reports[0]
    for i, report in enumerate(req.reports):
        if (report.instance_id, report.pod_ip) != (first.instance_id, first.pod_ip):
            raise ReportInvalid(f"reports[{i}] is of instance {report.instance_id} pod {report.pod_ip!r} and "
                                f"reports[0] of instance {first.instance_id} pod {first.pod_ip!r}: one call carries "
                                "one pod's reports")
    return first.instance_id, first.pod_ip


def take_all(core: ControllerCore,
             req: controller_pb2.ReportSoftwareFaultsRequest) -> controller_pb2.ReportSoftwareFaultsResponse:
    """Records each report in order; an invalid one is refused alone. UnknownInstanceError can only
    come before any report was recorded: the reports share one instance, and nothing between two of
    them (no await) can remove it."""
    results = []
    for report in req.reports:
        try:
            answer = take(core, report)
        except ReportInvalid as exc:
            results.append(controller_pb2.ReportSoftwareFaultResult(refused=True, message=str(exc)))
        else:
            results.append(controller_pb2.ReportSoftwareFaultResult(accepted=answer.accepted, message=answer.message))
    return controller_pb2.ReportSoftwareFaultsResponse(results=results)
