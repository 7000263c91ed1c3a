"""A recovery transaction drawn as a stage bar: one row per stage, placed on a common time axis from
the first fault observation to publication, with each stage's time. Shared by `motorctl timeline`
and `motor demo`; the stages are `motor.controller.fault_tolerance.stages`, the same ones the
Controller's `motor_scale_down_stage_seconds` histogram records.

    dp_scale_down sd-1-5d0c2e1f9a3b succeeded: 236.1 ms from the first fault observation to publication
      detection    |#                                       |    1.6 ms
      decision     |######                                  |   33.9 ms
      ...
      rebuild      |          ############################  |  163.6 ms
"""

from __future__ import annotations

from gen.motor.v1 import controller_pb2
from motor.controller.fault_tolerance.stages import Stage, fault_to_published_sec, transaction_stages

DEFAULT_WIDTH = 40


def duration_text(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1.0 else f"{seconds:.2f} s"


def _cells(stage: Stage, t0: float, total: float, width: int) -> tuple[int, int]:
    """(first cell, cells) of a stage: at least one cell, so a 1 ms RPC still shows where it ran."""
    first = min(width - 1, round((stage.start_unix_sec - t0) / total * width))
    last = min(width, max(first + 1, round((stage.end_unix_sec - t0) / total * width)))
    return first, last - first


def stage_bar(txn: controller_pb2.Transaction, width: int = DEFAULT_WIDTH, unicode: bool = True) -> str:
    stages = transaction_stages(txn)
    name = f"{txn.strategy} {txn.request_id or '-'} {txn.outcome.split(':')[0]}"
    if not stages:
        return f"{name}: no stages to draw"
    t0, t1 = stages[0].start_unix_sec, stages[-1].end_unix_sec
    total = max(t1 - t0, 1e-9)
    whole = fault_to_published_sec(txn)
    if whole is not None:
        header = f"{name}: {duration_text(whole)} from the first fault observation to publication"
    else:
        header = f"{name}: {duration_text(t1 - t0)} over {len(stages)} stages ({stages[0].name} to {stages[-1].name})"
    fill, edge = ("█", "▕") if unicode else ("#", "|")
    close = "▏" if unicode else "|"
    label = max(len(s.name) for s in stages)
    lines = [header]
    for stage in stages:
        first, cells = _cells(stage, t0, total, width)
        bar = " " * first + fill * cells + " " * (width - first - cells)
        lines.append(f"  {stage.name:<{label}}  {edge}{bar}{close} {duration_text(stage.duration_sec):>9}")
    longest = max(stages, key=lambda s: s.duration_sec)
    lines.append(f"  longest: {longest.name} ({100 * longest.duration_sec / total:.0f}% of the time drawn)")
    return "\n".join(lines)
