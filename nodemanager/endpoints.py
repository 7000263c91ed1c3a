"""The pod's endpoints and the checks every RPC applies to the endpoint ids it is given (pure).

Endpoint ids are original global DP ranks. A request naming ids that are empty (where ids are
required), repeated, not local, headless (no FT API: guard/finalize only) or retired is refused with
INVALID_ARGUMENT naming the offending ids.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gen.motor.v1 import common_pb2
from nodemanager.config import DeviceInfoConfig
from nodemanager.errors import InvalidArgument


@dataclass(frozen=True)
class LocalEndpoint:
    """One local engine as registered: id, where it listens, its cards, and the instance's one
    inference endpoint when requests reach the rank through it (engine_inference_address)."""

    id: int
    ip: str
    port: int  # 0 until the first launch picked one
    headless: bool
    device_infos: tuple[DeviceInfoConfig, ...] = ()
    instance_route: tuple[str, int] | None = None

    def to_pb(self) -> common_pb2.Endpoint:
        msg = common_pb2.Endpoint(
            id=self.id,
            ip=self.ip,
            business_port=self.port,
            mgmt_port=self.port,
            headless=self.headless,
            device_infos=[
                common_pb2.DeviceInfo(device_id=d.device_id, device_ip=d.device_ip, device_type=d.device_type)
                for d in self.device_infos
            ],
        )
        if self.instance_route is not None and not self.headless:
            msg.instance_route.host, msg.instance_route.port = self.instance_route
        return msg


def check_instance(instance_id: int, mine: int) -> None:
    if instance_id != mine:
        raise InvalidArgument(f"instance_id {instance_id} is not this pod's instance {mine}")


def check_endpoint_ids(
    ids: Sequence[int],
    *,
    local: Collection[int],
    headless: Collection[int] = (),
    retired: Collection[int] = (),
    field: str = "endpoint_ids",
    allow_empty: bool = False,
    allow_headless: bool = False,
    allow_retired: bool = False,
) -> list[int]:
    """Returns ``ids`` as a list when every id passes; else InvalidArgument naming the bad ids."""
    ids = list(ids)
    if not ids and not allow_empty:
        raise InvalidArgument(f"{field} [] is empty; name at least one local endpoint (local: {sorted(local)})")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise InvalidArgument(f"{field} {ids} repeat ids {repeated}")
    foreign = [i for i in ids if i not in local]
    if foreign:
        raise InvalidArgument(f"{field} {foreign} are not endpoints of this pod (local: {sorted(local)})")
    if not allow_headless:
        bad = [i for i in ids if i in headless]
        if bad:
            raise InvalidArgument(f"{field} {bad} are headless (no FT API; they only take guard/finalize)")
    if not allow_retired:
        bad = [i for i in ids if i in retired]
        if bad:
            raise InvalidArgument(f"{field} {bad} were retired by a committed scale-down (retired: {sorted(retired)})")
    return ids
