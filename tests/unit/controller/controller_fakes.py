"""In-memory doubles of the Controller's PEERS (NodeManagers with their engines, the Coordinator),
so the strategy and FaultManager logic can be exercised with a manual clock. The parts under test
(strategies, FaultManager, runtime, projection, persistence glue) are the real ones."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from gen.motor.v1 import common_pb2, controller_pb2, coordinator_pb2, node_manager_pb2
from motor.common.config.loader import load_config
from motor.controller.clients import ControllerPeers, PeerCallError
from motor.controller.clock import ManualClock
from motor.controller.config import ControllerConfig
from motor.controller.core import ControllerCore
from motor.controller.fault_tolerance.context import ScaleDownContext
from motor.controller.fault_tolerance.strategy.base import Outcome
from motor.controller.fault_tolerance.strategy.dp_scale_down import DpScaleDownStrategy
from motor.controller.persistence import MemoryRuntimeStore
from motor.testing.waits import turns_until

HEALTHY, UNHEALTHY, DEAD = common_pb2.ENGINE_HEALTH_HEALTHY, common_pb2.ENGINE_HEALTH_UNHEALTHY, common_pb2.ENGINE_HEALTH_DEAD
NONE, RECOVERING, FAILED = common_pb2.FT_STATE_UNSPECIFIED, common_pb2.FT_STATE_RECOVERING, common_pb2.FT_STATE_FAILED


@dataclass
class Engine:
    rank: int
    status: int = HEALTHY
    ft_state: int = NONE
    ft_error: str = ""
    last_request_id: str = ""
    # Status polls after apply before the engine reports healthy; None = never recovers by itself.
    recover_after_polls: int | None = 1
    fail_on_apply: str = ""
    polls_since_apply: int = -1
    fault_info: str = ""
    # When the NodeManager read the engine (EngineFtStatus.observed_at_unix_sec); 0: the answer carries no time.
    observed_at_unix_sec: float = 0.0

    def proto(self) -> common_pb2.EngineFtStatus:
        return common_pb2.EngineFtStatus(id=self.rank, status=self.status, ft_state=self.ft_state, ft_error=self.ft_error,
                                         last_ft_request_id=self.last_request_id, fault_info=self.fault_info,
                                         observed_at_unix_sec=self.observed_at_unix_sec)


@dataclass
class FakeCluster:
    """Pods (NodeManager address → ranks) and their engines, with a record of every call."""

    pods: dict[str, tuple[int, ...]]
    engines: dict[int, Engine] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    guard_holder: dict[str, str] = field(default_factory=dict)
    retired: dict[str, set[int]] = field(default_factory=dict)
    fail: dict[tuple[str, str], grpc.StatusCode] = field(default_factory=dict)
    apply_refused: set[int] = field(default_factory=set)
    # The Controller's clock (set by make_core): guard leases expire on it, as on a real NodeManager.
    clock: ManualClock | None = None
    lease_deadline: dict[str, float] = field(default_factory=dict)
    # Called when an apply arrives (lets a test make it slow, e.g. by advancing the clock).
    on_apply: Callable[[], None] | None = None
    # Called when a start arrives, before the pod spawns its engines (by address).
    on_start: Callable[[str], None] | None = None
    # Entries a pod's Status answers beyond what was asked (identity-contract violations), by address.
    extra_status: dict[str, list[int]] = field(default_factory=dict)
    # When each engine's apply was sent (EngineApplyResult.sent_at_unix_sec), by rank.
    apply_sent_at: dict[int, float] = field(default_factory=dict)
    # Awaited by a pod's guard before it answers (by address); lets a test hold one guard.
    hold_guard: dict[str, asyncio.Event] = field(default_factory=dict)
    # Called before each status poll; lets a test change engines mid-round (e.g. a late DEAD).
    on_status: Callable[[int], None] | None = None
    # Pods (by address) whose next status answer is lost on the way back, after the engines were read.
    lose_next_answer: set[str] = field(default_factory=set)
    status_polls: int = 0
    # Whether each status call asked the NodeManager to count its answer as reported (taken_as_evidence).
    status_taken: list[bool] = field(default_factory=list)
    # (wait_while, settle_sec, clock at the call) of every status call: the long poll the round asked for.
    status_settles: list[tuple[frozenset[tuple[int, int]], float, float]] = field(default_factory=list)
    # Hold a status answer for settle_sec (on the manual clock) while an engine asked for is in a
    # wait_while state, as a long-polling NodeManager whose engines do not settle in that time.
    long_poll: bool = False
    # Hold a long poll (settle_sec > 0 with an engine in a wait_while state) until this is set or the
    # call is cancelled, as a NodeManager whose engines do not change while the caller waits.
    hold_long_polls: asyncio.Event | None = None
    # NodeManagers that predate StatusRead: a guard or apply carrying one is answered without the reads.
    predate_then_status: bool = False
    # (call, address, then_status) of every guard and apply: the reads they carried.
    then_statuses: list[tuple[str, str, node_manager_pb2.StatusRead | None]] = field(default_factory=list)
    # The long polls cancelled by their caller while held, and every status call's reread_max_sec.
    status_cancelled: int = 0
    status_reread_caps: list[float] = field(default_factory=list)
    # The instruction of every apply, in order (node_manager_pb2.Instruction values).
    instructions: list[int] = field(default_factory=list)
    # The added_dp_ranks of every apply, in order (a scale-up's; empty otherwise).
    added: list[tuple[int, ...]] = field(default_factory=list)
    # The round_removed_dp_ranks of every apply, in order (a scale-down's; empty otherwise).
    round_removed: list[tuple[int, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for ranks in self.pods.values():
            for r in ranks:
                self.engines.setdefault(r, Engine(r))

    def set(self, rank: int, status: int, ft_state: int = NONE) -> None:
        self.engines[rank].status, self.engines[rank].ft_state = status, ft_state

    def fault(self, dead: set[int], unhealthy: set[int]) -> None:
        """Engines as the FT framework shows a peer failure: dead ranks and unhealthy survivors."""
        for rank in dead:
            self.set(rank, DEAD)
        for rank in unhealthy:
            self.set(rank, UNHEALTHY)

    def named(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]

    def _maybe_fail(self, name: str, address: str) -> None:
        code = self.fail.get((name, address)) or self.fail.get((name, "*"))
        if code is not None:
            raise PeerCallError(name, address, code, f"injected {code.name}")


class FakeNodeManagerClient:
    def __init__(self, cluster: FakeCluster, address: str) -> None:
        self.cluster, self.address = cluster, address

    async def _then(self, instance_id, request_id, then_status) -> dict:
        """The reads a guard or apply carried, as the NodeManager adds them to its answer."""
        c = self.cluster
        if then_status is None or c.predate_then_status:
            return {}
        def now() -> float:
            return c.clock.monotonic() if c.clock else 0.0

        started = now()
        try:
            entries = await self.status(instance_id, request_id, list(then_status.endpoint_ids),
                                        frozenset((w.status, w.ft_state) for w in then_status.wait_while),
                                        then_status.settle_sec)
        except PeerCallError as exc:  # the NodeManager answers the call, and why its read failed
            answer = node_manager_pb2.StatusReadAnswer(error_code=exc.code.value[0], error=exc.details)
        else:
            answer = node_manager_pb2.StatusReadAnswer(status=node_manager_pb2.StatusResponse(engines=entries))
        answer.read_sec = now() - started
        return {"then_status": answer}

    async def guard(self, instance_id, request_id, lease_sec, then_status=None):
        c = self.cluster
        c.then_statuses.append(("guard", self.address, then_status))
        c.calls.append(("guard", self.address, request_id, lease_sec))
        if self.address in c.hold_guard:
            await c.hold_guard[self.address].wait()
        c._maybe_fail("guard", self.address)
        holder = c.guard_holder.get(self.address)
        now = c.clock.monotonic() if c.clock else 0.0
        if holder and holder != request_id and now < c.lease_deadline.get(self.address, float("inf")):
            raise PeerCallError("guard", self.address, grpc.StatusCode.FAILED_PRECONDITION, f"held by {holder}")
        c.guard_holder[self.address] = request_id
        c.lease_deadline[self.address] = max(now + lease_sec, c.lease_deadline.get(self.address, 0.0)) \
            if holder == request_id else now + lease_sec
        return node_manager_pb2.GuardResponse(request_id=request_id, lease_remaining_sec=lease_sec,
                                              **await self._then(instance_id, request_id, then_status))

    async def status(self, instance_id, request_id, endpoint_ids, wait_while=frozenset(), settle_sec=0.0,
                     taken_as_evidence=False, reread_max_sec=0.0):
        # Answers at once unless long_poll, as a NodeManager that does not long-poll: the round's backoff paces it.
        c = self.cluster
        c.status_polls += 1
        c.status_taken.append(taken_as_evidence)
        c.status_settles.append((frozenset(wait_while), settle_sec, c.clock.monotonic() if c.clock else 0.0))
        c.status_reread_caps.append(reread_max_sec)
        if c.on_status is not None:
            c.on_status(c.status_polls)
        c.calls.append(("status", self.address, tuple(endpoint_ids)))
        c._maybe_fail("status", self.address)
        out = []
        for r in endpoint_ids:
            eng = c.engines[r]
            if eng.polls_since_apply >= 0:
                eng.polls_since_apply += 1
                if eng.fail_on_apply:
                    eng.status, eng.ft_state, eng.ft_error = UNHEALTHY, FAILED, eng.fail_on_apply
                elif eng.recover_after_polls is not None and eng.polls_since_apply > eng.recover_after_polls:
                    eng.status, eng.ft_state = HEALTHY, NONE
                    eng.polls_since_apply = -1
            out.append(eng.proto())
        out += [c.engines[r].proto() for r in c.extra_status.get(self.address, [])]
        waiting = settle_sec > 0 and any((e.status, e.ft_state) in wait_while for e in out)
        if waiting and c.hold_long_polls is not None:
            try:
                await c.hold_long_polls.wait()
            except asyncio.CancelledError:
                c.status_cancelled += 1
                raise
        elif waiting and c.long_poll:
            await c.clock.sleep(settle_sec)
        if self.address in c.lose_next_answer:
            c.lose_next_answer.discard(self.address)
            raise PeerCallError("status", self.address, grpc.StatusCode.UNAVAILABLE, "answer lost")
        return out

    async def apply(self, instance_id, request_id, removed, master_ip, master_rank, endpoint_ids, store_port=0,
                    instruction=node_manager_pb2.INSTRUCTION_SCALE_DOWN, added_dp_ranks=(), round_removed_dp_ranks=(),
                    then_status=None):
        c = self.cluster
        c.then_statuses.append(("apply", self.address, then_status))
        c.round_removed.append(tuple(round_removed_dp_ranks))
        c.calls.append(("apply", self.address, request_id, tuple(removed), master_ip, master_rank, tuple(endpoint_ids),
                        store_port))
        c.added.append(tuple(added_dp_ranks))
        c.instructions.append(instruction)
        if c.on_apply is not None:
            c.on_apply()
        c._maybe_fail("apply", self.address)
        results = []
        for r in endpoint_ids:
            accepted = r not in c.apply_refused
            results.append(node_manager_pb2.EngineApplyResult(
                endpoint_id=r, accepted=accepted, http_status=202 if accepted else 400, engine_request_id=request_id,
                sent_at_unix_sec=c.apply_sent_at.get(r, 0.0),
                request_body='{"instruction": "scale_down"}', message="" if accepted else "Invalid instruction"))
            if accepted:
                eng = c.engines[r]
                eng.status, eng.ft_state, eng.last_request_id, eng.polls_since_apply = UNHEALTHY, RECOVERING, request_id, 0
        accepted = all(x.accepted for x in results)
        read = await self._then(instance_id, request_id, then_status) if accepted else {}
        return node_manager_pb2.ApplyResponse(accepted=accepted, results=results,
                                              dp_store_port=store_port or 29600 + master_rank, **read)

    async def finalize(self, instance_id, request_id, commit, retired_ids):
        c = self.cluster
        c.calls.append(("finalize", self.address, request_id, commit, tuple(retired_ids)))
        c._maybe_fail("finalize" if commit else "abort", self.address)
        if c.guard_holder.get(self.address) != request_id:
            raise PeerCallError("finalize", self.address, grpc.StatusCode.FAILED_PRECONDITION, "stale")
        if commit and c.clock is not None and c.clock.monotonic() >= c.lease_deadline.get(self.address, float("inf")):
            raise PeerCallError("finalize", self.address, grpc.StatusCode.FAILED_PRECONDITION, "lease expired")
        del c.guard_holder[self.address]
        if commit:
            c.retired.setdefault(self.address, set()).update(retired_ids)
        return node_manager_pb2.FinalizeResponse(retired_ids=sorted(c.retired.get(self.address, ())), guard_released=True)

    async def stop_engines(self, instance_id, request_id, timeout_sec):
        self.cluster.calls.append(("stop_engines", self.address))
        self.cluster._maybe_fail("stop_engines", self.address)
        return node_manager_pb2.StopEnginesResponse(stopped_ids=list(self.cluster.pods[self.address]))

    async def start_engines(self, instance_id, request_id, master_ip, master_port, timeout_sec, endpoint_ids=(),
                            join=False):
        c = self.cluster
        if join:  # joiners of a scale-up: the named ranks only, still retired until the round commits
            c.calls.append(("join", self.address, request_id, tuple(endpoint_ids)))
            c._maybe_fail("join", self.address)
            for r in endpoint_ids:
                c.engines[r] = Engine(r)
            return node_manager_pb2.StartEnginesResponse(launched_at_unix_sec=c.clock.wall() if c.clock else 0.0)
        c.calls.append(("start_engines", self.address, master_ip))
        c._maybe_fail("start_engines", self.address)
        if c.on_start is not None:
            c.on_start(self.address)
        for r in c.pods[self.address]:
            c.engines[r] = Engine(r)
        c.retired.pop(self.address, None)
        return node_manager_pb2.StartEnginesResponse(launched_at_unix_sec=c.clock.wall() if c.clock else 0.0)

    async def stop_pod(self, request_id, reason, instance_id, pod_ip):
        self.cluster.calls.append(("stop_pod", self.address))
        self.cluster._maybe_fail("stop_pod", self.address)
        return node_manager_pb2.StopPodResponse(accepted=True)


class FakeNodeManagers:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def get(self, address: str) -> FakeNodeManagerClient:
        return FakeNodeManagerClient(self.cluster, address)

    async def close(self) -> None:
        pass


class FakeCoordinator:
    """Records publications; keeps the Coordinator's view to check DEL identity like the real one."""

    address = "coordinator:1"

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[int, list[int]]]] = []
        self.view: dict[int, list[int]] = {}
        self.down = False
        self.refuse_del = False
        # Called after each acknowledged refresh with its event name (lets a test interleave a SET).
        self.on_refresh: Callable[[str], None] | None = None
        # Re-inference counts it reports per instance (cumulative, as the real one).
        self.reinference: dict[int, int] = {}
        # Paused instances, and the requests in flight per published instance (ListInstances' counts).
        self.paused: set[int] = set()
        self.outstanding: dict[int, int] = {}
        # Canaries asked for: (instance_id, endpoint_ids, timeout_sec, request_id); the answer comes
        # from `canary_answer(instance_id, endpoint_ids)` (default: served by the first endpoint).
        self.canaries: list[tuple[int, list[int], float, str]] = []
        self.canary_answer: Callable[[int, list[int]], coordinator_pb2.SendCanaryResponse] | None = None

    async def refresh(self, event, instances, revision):
        name = {1: "ADD", 2: "DEL", 3: "SET", 4: "PAUSE", 5: "RESUME"}[event]
        ids = {i.id: sorted(e.id for e in i.endpoints) for i in instances}
        self.events.append((name, ids))
        if self.down:
            raise PeerCallError(f"refresh:{name.lower()}", self.address, grpc.StatusCode.UNAVAILABLE, "down")
        if name == "DEL":
            if self.refuse_del:
                raise PeerCallError("refresh:del", self.address, grpc.StatusCode.UNAVAILABLE, "injected DEL failure")
            for iid, eps in ids.items():
                if self.view.get(iid) != eps:
                    raise PeerCallError("refresh:del", self.address, grpc.StatusCode.FAILED_PRECONDITION, "identity")
            for iid in ids:
                del self.view[iid]
        elif name in ("PAUSE", "RESUME"):
            (self.paused.update if name == "PAUSE" else self.paused.difference_update)(ids)
        elif name == "ADD":
            self.view.update(ids)
        else:
            self.view = dict(ids)
        if self.on_refresh is not None:
            self.on_refresh(name)
        return revision

    async def list_instances(self) -> coordinator_pb2.ListInstancesResponse:
        if self.down:
            raise PeerCallError("list_instances", self.address, grpc.StatusCode.UNAVAILABLE, "down")
        return coordinator_pb2.ListInstancesResponse(instances=[
            coordinator_pb2.PublishedInstance(instance=common_pb2.Instance(id=iid), paused=iid in self.paused,
                                              outstanding_requests={ids[0]: self.outstanding.get(iid, 0)} if ids else {})
            for iid, ids in sorted(self.view.items())], reinference=[
            coordinator_pb2.InstanceReinference(instance_id=iid, migrated_requests=n)
            for iid, n in sorted(self.reinference.items())])

    async def send_canary(self, instance_id, endpoint_ids, timeout_sec, request_id) -> coordinator_pb2.SendCanaryResponse:
        self.canaries.append((instance_id, list(endpoint_ids), timeout_sec, request_id))
        if self.down:
            raise PeerCallError("send_canary", self.address, grpc.StatusCode.UNAVAILABLE, "down")
        if self.canary_answer is not None:
            return self.canary_answer(instance_id, list(endpoint_ids))
        return coordinator_pb2.SendCanaryResponse(endpoint_id=endpoint_ids[0], served=True, http_status=200,
                                                  detail="served", request_id=request_id)

    async def close(self) -> None:
        pass


def make_config(**ft) -> ControllerConfig:
    overrides = [("fault_tolerance_config.enable_dp_scale_down", True)]
    overrides += [(f"fault_tolerance_config.{k}", v) for k, v in ft.items()]
    return load_config(ControllerConfig, None, overrides)


def make_core(cluster: FakeCluster, config: ControllerConfig | None = None, coordinator: FakeCoordinator | None = None,
              store: MemoryRuntimeStore | None = None, fast_recovery=None) -> tuple[ControllerCore, ManualClock]:
    clock = ManualClock()
    cluster.clock = clock
    peers = ControllerPeers(FakeNodeManagers(cluster), coordinator)  # type: ignore[arg-type]
    core = ControllerCore(config or make_config(), store or MemoryRuntimeStore(), peers, clock, fast_recovery)
    return core, clock


def register_request(cluster: FakeCluster, address: str, instance_id: int = 7, capability: bool = True,
                     redundant: int = 8, store_port_base: int = 0, scale_up: bool = False) -> controller_pb2.RegisterRequest:
    pod_ip = address.split(":")[0]
    dp_size = sum(len(r) for r in cluster.pods.values())
    req = controller_pb2.RegisterRequest(instance_id=instance_id, role=common_pb2.ROLE_UNION, model="m", dp_size=dp_size)
    req.pod.pod_ip, req.pod.node_manager_address, req.pod.node_name = pod_ip, address, f"node-{pod_ip}"
    req.pod.dp_store_port_base = store_port_base
    req.pod.endpoint_ids.extend(cluster.pods[address])
    for i, r in enumerate(cluster.pods[address]):
        ep = req.endpoints.add(id=r, ip=pod_ip, business_port=8000 + r, mgmt_port=8000 + r)
        ep.device_infos.add(device_id=f"Ascend910-{i}")
    if capability:
        req.ft_capability.CopyFrom(common_pb2.FtCapability(
            engine_ft_enabled=True, scale_down_supported=True, external_lb=True, auto_recovery=False,
            enable_eplb=True, num_redundant_experts=redundant, retry_supported=True, supports_scale_up=scale_up))
    return req


async def assemble(core: ControllerCore, cluster: FakeCluster, instance_id: int = 7, **kwargs) -> None:
    for address in cluster.pods:
        await core.register(register_request(cluster, address, instance_id, **kwargs))


def two_pods() -> FakeCluster:
    return FakeCluster(pods={"127.0.0.2:1": (0, 1), "127.0.0.3:1": (2, 3)})


def heartbeat_all(core: ControllerCore, cluster: FakeCluster, instance_id: int = 7, dead: set[int] = frozenset()) -> None:
    """Every pod reports its expected ranks alive, except `dead` ones (their processes are gone)."""
    for seq, (address, ranks) in enumerate(cluster.pods.items()):
        committed = core.runtimes.get(instance_id).dead_committed
        alive = [r for r in ranks if r not in committed and r not in dead]
        core.heartbeat(controller_pb2.HeartbeatRequest(pod_ip=address.split(":")[0], instance_id=instance_id,
                                                       alive_endpoint_ids=alive, seq=seq))


async def settle(core: ControllerCore, instance_id: int = 7) -> None:
    """Lets the running strategy of the instance end."""
    await turns_until(lambda: core.faults.running(instance_id) is None, 300, f"instance {instance_id}'s strategy ended")


def scale_down_ctx(core: ControllerCore, dead, unhealthy, iid: int = 7) -> ScaleDownContext:
    """The context of a scale-down of `dead` (survivors `unhealthy`) from the instance's runtime."""
    rt = core.runtimes.get(iid)
    return ScaleDownContext(iid, rt.original_dp_ranks, rt.dead_committed, frozenset(dead), frozenset(unhealthy),
                            rt.fallback_strategy, core.clock.wall())


async def run_scale_down(core: ControllerCore, dead, unhealthy) -> tuple[DpScaleDownStrategy, Outcome]:
    """One scale-down round of instance 7, run to its outcome."""
    strategy = DpScaleDownStrategy(core.deps, scale_down_ctx(core, dead, unhealthy))
    return strategy, await strategy.run()
