"""Property-based check of the routing table against a small reference model: any interleaving of
refreshes (valid or not), picks, releases, failures and clock steps keeps the contract."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from motor.coordinator.routing import NoRoute, NoRouteKind, Route, RoutingTable
from motor.coordinator.serving_view import EndpointSpec, InstanceSpec, RefreshError, RefreshErrorCode, RefreshEvent

COOLDOWN_SEC = 2.0
MODELS = ["a", "b"]



def _endpoints(items) -> tuple[EndpointSpec, ...]:
    return tuple(EndpointSpec(id=r, ip="127.0.0.1", business_port=p, headless=h) for r, h, p in items)


# Mostly publishable views (unique ids, routable ports), sometimes anything (duplicates, port 0, empty).
valid_endpoints_st = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([False, False, False, True]), st.sampled_from([8000, 8001])),
    min_size=1, max_size=4, unique_by=lambda t: t[0],
).map(_endpoints)
any_endpoints_st = st.lists(
    st.tuples(st.integers(0, 4), st.booleans(), st.sampled_from([8000, 0])), max_size=4
).map(_endpoints)
endpoints_st = st.one_of(valid_endpoints_st, valid_endpoints_st, valid_endpoints_st, any_endpoints_st)
instance_st = st.builds(InstanceSpec, id=st.integers(0, 3), model=st.sampled_from(MODELS), endpoints=endpoints_st)


def _valid_view(inst: InstanceSpec) -> bool:
    ids = [e.id for e in inst.endpoints]
    return bool(ids) and len(set(ids)) == len(ids) and all(e.headless or e.business_port > 0 for e in inst.endpoints)


class RoutingTableMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.table = RoutingTable(cooldown_sec=COOLDOWN_SEC)
        self.now = 0.0
        # Reference model.
        self.views: dict[int, InstanceSpec] = {}
        self.paused: set[int] = set()
        self.revision = 0
        self.held: list[Route] = []
        self.failed_at: dict[tuple[int, int], float] = {}
        self.known_models: set[str] = set()

    def _expected(self, event: RefreshEvent, instances: list[InstanceSpec], revision: int) -> RefreshErrorCode | None:
        ids = [i.id for i in instances]
        if len(set(ids)) != len(ids) or (not instances and event is not RefreshEvent.SET):
            return RefreshErrorCode.INVALID_ARGUMENT
        if event in (RefreshEvent.ADD, RefreshEvent.SET) and not all(_valid_view(i) for i in instances):
            return RefreshErrorCode.INVALID_ARGUMENT
        if event is RefreshEvent.DEL and any(len({e.id for e in i.endpoints}) != len(i.endpoints) for i in instances):
            return RefreshErrorCode.INVALID_ARGUMENT
        if revision <= self.revision:
            return RefreshErrorCode.FAILED_PRECONDITION
        if event is RefreshEvent.DEL and any(
            i.id not in self.views or {e.id for e in i.endpoints} != {e.id for e in self.views[i.id].endpoints}
            for i in instances
        ):
            return RefreshErrorCode.FAILED_PRECONDITION
        if event in (RefreshEvent.PAUSE, RefreshEvent.RESUME) and any(i.id not in self.views for i in instances):
            return RefreshErrorCode.NOT_FOUND
        return None

    @rule(event=st.sampled_from(list(RefreshEvent)), instances=st.lists(instance_st, max_size=3),
          bump=st.integers(-1, 2))
    def refresh(self, event: RefreshEvent, instances: list[InstanceSpec], bump: int) -> None:
        revision = self.revision + bump
        expected = self._expected(event, instances, revision)
        before = self.table.snapshot(self.now)
        try:
            acked = self.table.refresh(event, instances, revision)
        except RefreshError as exc:
            assert expected is exc.code, (expected, exc.code, exc.message)
            assert self.table.snapshot(self.now) == before
            return
        assert expected is None, expected
        assert acked == revision
        self.revision = revision
        if event in (RefreshEvent.ADD, RefreshEvent.SET):
            self.known_models |= {i.model for i in instances}
        if event is RefreshEvent.ADD:
            self.views.update({i.id: i for i in instances})
        elif event is RefreshEvent.SET:
            self.views = {i.id: i for i in instances}
            self.paused &= set(self.views)
        elif event is RefreshEvent.DEL:
            for i in instances:
                del self.views[i.id]
                self.paused.discard(i.id)
        elif event is RefreshEvent.PAUSE:
            self.paused |= {i.id for i in instances}
        else:
            self.paused -= {i.id for i in instances}
        published = {(i.id, e.id) for i in self.views.values() for e in i.endpoints}
        self.failed_at = {k: v for k, v in self.failed_at.items() if k in published}

    @rule(instance=instance_st)
    def del_exactly_what_is_published(self, instance: InstanceSpec) -> None:
        current = self.views.get(instance.id)
        if current is not None:
            self.refresh(RefreshEvent.DEL, [current], 1)

    def _eligible(self, model: str | None, exclude: set[tuple[int, int]],
                  avoid: set[int]) -> list[tuple[bool, int, int, tuple[int, int]]]:
        """(instance avoided, outstanding, rank, key) of every endpoint the request may use."""
        out = []
        for inst in self.views.values():
            if (model is not None and inst.model != model) or inst.id in self.paused:
                continue
            for e in inst.endpoints:
                key = (inst.id, e.id)
                cooling = key in self.failed_at and self.now < self.failed_at[key] + COOLDOWN_SEC
                if not e.headless and key not in exclude and not cooling:
                    out.append((inst.id in avoid, self.table.outstanding(key), e.id, key))
        return out

    @rule(model=st.sampled_from([None, *MODELS, "zzz"]), exclude_n=st.integers(0, 2), data=st.data())
    def pick(self, model: str | None, exclude_n: int, data: st.DataObject) -> None:
        all_keys = sorted({(i.id, e.id) for i in self.views.values() for e in i.endpoints})
        exclude = set(data.draw(st.lists(st.sampled_from(all_keys), max_size=exclude_n))) if all_keys else set()
        avoid = {k[0] for k in exclude}  # as the proxy does for a retry
        eligible = self._eligible(model, exclude, avoid)
        choice = self.table.pick(model, self.now, exclude, avoid)
        if isinstance(choice, NoRoute):
            assert not eligible, (choice, eligible)
            serves = any(model is None or i.model == model for i in self.views.values())
            unknown = bool(self.views) and model is not None and not serves and model not in self.known_models
            assert (choice.kind is NoRouteKind.UNKNOWN_MODEL) == unknown, (choice, self.known_models)
            return
        chosen = [c for c in eligible if c[3] == choice.key]
        assert chosen, f"{choice} is not eligible: {eligible}"
        # Loads in eligible are from before this pick.
        assert chosen[0][:3] == min(c[:3] for c in eligible), (choice, eligible)
        spec = next(e for e in self.views[choice.instance_id].endpoints if e.id == choice.rank)
        assert (choice.ip, choice.port) == (spec.ip, spec.business_port)
        self.held.append(choice)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        route = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        self.table.release(route)

    @precondition(lambda self: self.views)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        keys = sorted((i.id, e.id) for i in self.views.values() for e in i.endpoints)
        key = data.draw(st.sampled_from(keys))
        self.table.mark_failed(key, self.now)
        self.failed_at[key] = self.now

    @rule(step=st.sampled_from([0.5, 1.0, 2.5]))
    def advance(self, step: float) -> None:
        self.now += step

    @invariant()
    def outstanding_matches_held(self) -> None:
        if not hasattr(self, "table"):
            return
        counts = Counter(r.key for r in self.held)
        assert self.table.total_outstanding() == sum(counts.values())
        for key, n in counts.items():
            assert self.table.outstanding(key) == n

    @invariant()
    def published_view_matches(self) -> None:
        if not hasattr(self, "table"):
            return
        snap = self.table.snapshot(self.now)
        assert snap.revision == self.revision
        assert {v.spec.id: v.spec for v in snap.instances} == self.views
        assert {v.spec.id for v in snap.instances if v.paused} == self.paused


RoutingTableMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRoutingTable = RoutingTableMachine.TestCase
