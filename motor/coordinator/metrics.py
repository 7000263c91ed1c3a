"""The Coordinator's Prometheus metrics, in a `CollectorRegistry` the service owns, served at
`GET /metrics` on its HTTP port.

Per request (`RequestTrace`, driven by the proxy): outcome and HTTP code, latency, retries, attempts
that failed before the first byte, holding (requests waiting while nothing can serve, and for
how long), and re-inference (migrations off a faulted engine, migrated requests by outcome); the
idle-fault probe's canaries by outcome. Read from the routing table at scrape time
(`TableCollector`): published and routable endpoints per instance, paused instances, in-flight
requests per endpoint, the revision. Labels are bounded: paths, outcomes, codes, reasons, instance
ids and original ranks; never a request id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from motor.common.authz import count_refusals
from motor.coordinator.routing import Route, RoutingTable

# Toy tokens take milliseconds, real completions seconds to minutes; a held request up to
# hold_when_unavailable_sec (30 s by default).
REQUEST_BUCKETS_SEC = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
HOLD_BUCKETS_SEC = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)
# The Coordinator's own answers (an engine's answer is "served" whatever its code).
OUTCOMES_BY_STATUS = {400: "bad_request", 404: "unknown_model", 500: "error", 503: "unavailable"}


class CoordinatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        count_refusals(r, "motor_coordinator_authz_refusals_total")
        self.requests = Counter("motor_coordinator_requests_total",
                                "Inference requests by outcome (served: an engine's answer passed through) and "
                                "HTTP code", ["path", "outcome", "code"], registry=r)
        self.request_seconds = Histogram("motor_coordinator_request_seconds",
                                         "Inference request latency until the response was sent or started",
                                         ["path", "outcome"], buckets=REQUEST_BUCKETS_SEC, registry=r)
        self.retries = Counter("motor_coordinator_retries_total",
                               "Attempts after a request's first one (each after a failure before the first byte)",
                               registry=r)
        self.upstream_failures = Counter("motor_coordinator_upstream_failures_total",
                                         "Attempts that failed before the first byte, by instance", ["instance_id"],
                                         registry=r)
        self.stream_breaks = Counter("motor_coordinator_stream_breaks_total",
                                     "Streams that broke after their first byte (reported in the stream, not retried)",
                                     registry=r)
        self.held = Counter("motor_coordinator_held_requests_total",
                            "Requests that had to wait because nothing could serve them", registry=r)
        self.holding = Gauge("motor_coordinator_holding_requests", "Requests waiting now for something to serve",
                             registry=r)
        self.hold_seconds = Histogram("motor_coordinator_hold_seconds", "Time a held request spent waiting",
                                      buckets=HOLD_BUCKETS_SEC, registry=r)
        self.migrations = Counter("motor_coordinator_migrations_total",
                                  "Re-inference: a request moved off an engine that faulted under it, by the instance "
                                  "of that engine and how it failed (engine_error: a 5xx answer or an error event; "
                                  "connection: reset or broken; withdrawn: left the serving view)",
                                  ["instance_id", "reason"], registry=r)
        self.migrated_requests = Counter("motor_coordinator_migrated_requests_total",
                                         "Requests that migrated at least once, by how they ended (completed: the "
                                         "client got the whole answer; failed: it did not)", ["path", "outcome"],
                                         registry=r)
        self.canaries = Counter("motor_coordinator_canaries_total",
                                "Canary requests sent for the Controller's idle-fault probe, by outcome (served, "
                                "failed: the engine answered an error or the connection broke, timeout)",
                                ["outcome"], registry=r)
        self.admission_refusals = Counter("motor_coordinator_admission_refusals_total",
                                          "Inference requests refused before they were read, by reason (api_key: "
                                          "no valid key; concurrency: max_concurrent_requests reached, 429)",
                                          ["reason"], registry=r)
        self.oversized_answers = Counter("motor_coordinator_oversized_answers_total",
                                         "Non-streamed engine answers larger than max_engine_answer_bytes (502)",
                                         registry=r)

    def watch_table(self, table: RoutingTable, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry.register(TableCollector(table, clock))

    def trace(self, path: str, started_sec: float) -> RequestTrace:
        return RequestTrace(self, path, started_sec)


class RequestTrace:
    """What one request went through, observed when it ends (`finish`)."""

    def __init__(self, metrics: CoordinatorMetrics, path: str, started_sec: float) -> None:
        self._m = metrics
        self._path = path
        self._started = started_sec
        self._hold_started: float | None = None
        self._held_sec = 0.0
        self._ever_held = False
        self._migrated = False
        self._migration_failed = False

    def hold(self, now_sec: float) -> None:
        if self._hold_started is not None:
            return
        if not self._ever_held:
            self._ever_held = True
            self._m.held.inc()
        self._hold_started = now_sec
        self._m.holding.inc()

    def end_hold(self, now_sec: float) -> None:
        if self._hold_started is None:
            return
        self._held_sec += now_sec - self._hold_started
        self._hold_started = None
        self._m.holding.dec()

    def attempt(self, number: int) -> None:
        if number > 1:
            self._m.retries.inc()

    def upstream_failed(self, route: Route) -> None:
        self._m.upstream_failures.labels(str(route.instance_id)).inc()

    def migrated(self, route: Route, reason: str) -> None:
        """The request leaves ``route``'s engine, which faulted under it, for another endpoint."""
        self._migrated = True
        self._m.migrations.labels(str(route.instance_id), reason).inc()

    def migration_failed(self) -> None:
        """A migrated request did not get its whole answer after all."""
        self._migration_failed = True

    def finish(self, now_sec: float, status: int | None, served: bool) -> None:
        """`status` None: the client went away first."""
        self.end_hold(now_sec)
        if self._ever_held:
            self._m.hold_seconds.observe(self._held_sec)
        if status is None:
            outcome, code = "client_gone", "none"
        else:
            outcome, code = ("served" if served else OUTCOMES_BY_STATUS.get(status, "refused")), str(status)
        self._m.requests.labels(self._path, outcome, code).inc()
        self._m.request_seconds.labels(self._path, outcome).observe(now_sec - self._started)
        if self._migrated:
            ok = outcome == "served" and not self._migration_failed
            self._m.migrated_requests.labels(self._path, "completed" if ok else "failed").inc()


class TableCollector(Collector):
    """The routing table's state, read when scraped."""

    def __init__(self, table: RoutingTable, clock: Callable[[], float]) -> None:
        self._table = table
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self._table.snapshot(self._clock())
        published = GaugeMetricFamily("motor_coordinator_published_endpoints", "Endpoints published per instance",
                                      labels=["instance_id"])
        routable = GaugeMetricFamily("motor_coordinator_routable_endpoints",
                                     "Published endpoints that may take traffic now (not paused, not headless, not "
                                     "cooling down)", labels=["instance_id"])
        paused = GaugeMetricFamily("motor_coordinator_instance_paused", "1 when the instance is paused",
                                   labels=["instance_id"])
        in_flight = GaugeMetricFamily("motor_coordinator_in_flight_requests", "Requests in flight per endpoint",
                                      labels=["instance_id", "rank"])
        for view in snapshot.instances:
            iid = str(view.spec.id)
            published.add_metric([iid], len(view.endpoints))
            routable.add_metric([iid], 0 if view.paused else sum(
                1 for e in view.endpoints if not e.spec.headless and not e.cooling_down))
            paused.add_metric([iid], 1 if view.paused else 0)
            for e in view.endpoints:
                in_flight.add_metric([iid, str(e.spec.id)], e.outstanding)
        total = GaugeMetricFamily("motor_coordinator_in_flight", "Requests in flight, withdrawn endpoints included",
                                  value=self._table.total_outstanding())
        revision = GaugeMetricFamily("motor_coordinator_revision", "Last acknowledged publication revision",
                                     value=snapshot.revision)
        yield from (published, routable, paused, in_flight, total, revision)
