"""The simulated engines' elastic scale-up (docs/engine-protocol-scale-up.md and the contract the
reference engine follows): join mode and the `scale_up` apply, for the vllm and rfc dialects.

A joiner is a process started for a removed rank in join mode: it loads (`Knobs.load_sec`), then
reports `healthy` with no group and serves nothing (not a member) until its round commits. A
`scale_up` apply is taken by survivors (healthy members) and joiners (healthy, named in
`added_dp_ranks`); the engine leaves `healthy` before its 202: `unhealthy` (vllm) or `unhealthy` +
`recovering` (rfc). Every participant of the grown group (original ranks minus `removed_dp_ranks`)
must check in within the window, then the group is rebuilt (the scale-down round's machinery in
`engines.SimGroup`): each participant healthy in the grown group; a failed round leaves survivors
dead (vllm, as a failed vote) or unhealthy + failed (rfc), joiners unhealthy with the error. A
peer failing during the round fails it. Other dialects answer 400 "Invalid instruction".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

# `engines.SimGroup` (which imports this module): its engines and rounds are made by its own types.
SimGroup = Any

SCALE_UP_DIALECTS = ("vllm", "rfc")


def _refuse(message: str) -> tuple[int, bytes]:
    return 400, json.dumps({"detail": message}).encode()


def spawn_joiner(group: SimGroup, rank: int) -> None:
    """A fresh process in join mode: ready (healthy, no group) once loaded; it forms no group."""
    group.engines[rank] = eng = type(group.engines[rank])(rank, process_up=True, joiner=True)
    group.members.discard(rank)
    group._forming.discard(rank)

    def loaded() -> None:
        if group.engines.get(rank) is eng and eng.process_up:
            eng.ready = True
            group._on_change()

    asyncio.get_running_loop().call_later(group.knobs.load_sec, loaded)


def apply_scale_up(group: SimGroup, rank: int, doc: dict) -> tuple[int, bytes]:
    """(HTTP status, body) of a `scale_up` apply to `rank`, decided before the answer goes out."""
    eng = group.engines[rank]
    if group.dialect not in SCALE_UP_DIALECTS:
        return _refuse("Invalid instruction")
    request_id = doc.get("request_id")
    params = doc.get("params") or {}
    added, removed = params.get("added_dp_ranks"), params.get("removed_dp_ranks")
    if not isinstance(request_id, str) or not request_id:
        return _refuse(f"request_id {request_id!r} must be a non-empty string")
    if not isinstance(added, list) or not added or not isinstance(removed, list):
        return _refuse(f"added_dp_ranks {added!r} must be a non-empty list, removed_dp_ranks {removed!r} a list")
    if not params.get("dp_master_ip") or not params.get("dp_store_port"):
        return _refuse("dp_master_ip and dp_store_port are required")
    ranks = set(group.engines)
    if not set(added) <= ranks or not set(removed) <= ranks:
        return _refuse(f"ranks {sorted((set(added) | set(removed)) - ranks)} are not original ranks")
    if set(added) & set(removed):
        return _refuse(f"ranks {sorted(set(added) & set(removed))} are both added and removed")
    if eng.applied == request_id:
        return 202, json.dumps({"message": "duplicate ignored", "request_id": request_id}).encode()
    if eng.joiner:
        if rank not in added:
            return _refuse(f"joiner {rank} is not in added_dp_ranks {added}")
    elif rank in added:
        return _refuse(f"rank {rank} is in the group: it cannot be added")
    elif set(added) & group.members:
        return _refuse(f"added_dp_ranks {sorted(set(added) & group.members)} are in the group now")
    if not eng.ready or eng.status != "healthy" or (not eng.joiner and rank not in group.members):
        return _refuse(f"rank {rank} is {eng.status}; scale_up needs healthy")
    eng.applied = request_id
    # Out of `healthy` before the 202: no read after it shows the pre-round state.
    eng.set("unhealthy", ft_state="recovering" if group.dialect == "rfc" else None, dialect=group.dialect)
    eng.last_ft_request_id = request_id if group.dialect == "rfc" else None
    participants = frozenset(ranks - set(removed))
    rnd = group._round
    if rnd is None or rnd.request_id != request_id:
        if rnd is not None and rnd.task is not None:
            rnd.task.cancel()
        rnd = group._round = group.round_type(request_id, participants, scale_up=True)
        rnd.task = asyncio.get_running_loop().create_task(group._run_round(rnd))
    rnd.checked_in.add(rank)
    group._on_change()
    return 202, json.dumps({"message": "accepted", "request_id": request_id}).encode()
