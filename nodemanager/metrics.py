"""The NodeManager's Prometheus metrics, in a `CollectorRegistry` the agent owns, served on
`metrics_http.{host,port}` (`metrics_port` in the ready file).

Observed where things happen: the poller (every FT status read, its latency and error kind), the
reporter (delivered, retried, dropped and why), the supervisor's exit events, the FT proxy (apply
calls and each engine's apply by outcome, finalizes) and, read at scrape time, the guard, the report queue
and the ranks a StopPod keeps stopped. Labels are bounded
(kinds, outcomes, reasons); never a request id or an endpoint id.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from motor.common.authz import count_refusals

# A status read is a local HTTP GET: milliseconds, up to engine_request_timeout_sec when hung.
POLL_BUCKETS_SEC = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
POLL_ERROR_KINDS = ("timeout", "unreachable", "protocol")


class NodeManagerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        count_refusals(r, "motor_nodemanager_authz_refusals_total")
        self.polls = Counter("motor_nodemanager_status_polls_total", "FT status reads of local engines by the poller",
                             registry=r)
        self.poll_errors = Counter("motor_nodemanager_status_poll_errors_total",
                                   "FT status reads that failed, by kind", ["kind"], registry=r)
        for kind in POLL_ERROR_KINDS:  # exported as 0 from the start, so rate() and alerts see them
            self.poll_errors.labels(kind)
        self.poll_seconds = Histogram("motor_nodemanager_status_poll_seconds", "Latency of one FT status read",
                                      buckets=POLL_BUCKETS_SEC, registry=r)
        self.engine_requests = Counter("motor_nodemanager_engine_requests_total",
                                       "HTTP requests to the local engines' FT API (poller and RPCs), by route",
                                       ["route"], registry=r)
        self.engine_bytes = Counter("motor_nodemanager_engine_body_bytes_total",
                                    "Body bytes of the HTTP requests to the local engines' FT API, by route and "
                                    "direction (headers not counted)", ["route", "direction"], registry=r)
        self._engine_http_children: dict[str, tuple] = {}
        self.status_rpc_reads = Counter("motor_nodemanager_status_rpc_engine_reads_total",
                                        "Engine status reads made by Status RPCs: the first read of each engine, and "
                                        "the long poll's re-reads", ["read"], registry=r)
        self.reports_sent = Counter("motor_nodemanager_fault_reports_sent_total",
                                    "Fault reports the Controller answered, by kind", ["kind"], registry=r)
        self.reports_taken = Counter("motor_nodemanager_fault_reports_taken_total",
                                     "Fault reports not sent because the Controller took the read as evidence "
                                     "(a Status call flagged taken_as_evidence), by kind", ["kind"], registry=r)
        self.report_retries = Counter("motor_nodemanager_fault_report_retries_total",
                                      "Fault report attempts that failed transiently and were tried again", registry=r)
        self.reports_dropped = Counter("motor_nodemanager_fault_reports_dropped_total",
                                       "Fault reports never delivered, by reason", ["reason"], registry=r)
        self.engine_exits = Counter("motor_nodemanager_engine_exits_total",
                                    "Engine process exits, asked for (intentional) or not", ["intentional"],
                                    registry=r)
        self.apply_calls = Counter("motor_nodemanager_apply_calls_total",
                                   "Apply RPCs: accepted by every engine, not accepted, or refused before forwarding",
                                   ["outcome"], registry=r)
        self.engine_applies = Counter("motor_nodemanager_engine_applies_total",
                                      "Applies forwarded to one engine, by its answer (accepted: 202)", ["outcome"],
                                      registry=r)
        self.finalizes = Counter("motor_nodemanager_finalizes_total", "Finalize calls that released the guard",
                                 ["decision"], registry=r)
        self.guard_held = Gauge("motor_nodemanager_guard_held", "1 while a scale-down guard lease is live",
                                registry=r)
        self.guard_remaining = Gauge("motor_nodemanager_guard_remaining_seconds",
                                     "Seconds left on the guard lease (0 when none)", registry=r)
        self.report_queue = Gauge("motor_nodemanager_fault_report_queue", "Fault reports waiting for delivery",
                                  registry=r)
        self.watched = Gauge("motor_nodemanager_polled_engines", "Local engines whose FT status is polled", registry=r)
        self.stop_pod_refusals = Counter("motor_nodemanager_stop_pod_refusals_total",
                                         "StopPod calls refused because they name another instance or pod",
                                         ["reason"], registry=r)
        self.stopped_ranks = Gauge("motor_nodemanager_stopped_ranks",
                                   "Local ranks kept stopped by a StopPod this pod obeyed (its stop record)",
                                   registry=r)

    def read_at_scrape(self, *, guard_live: Callable[[], bool], guard_remaining_sec: Callable[[], float],
                       report_queue: Callable[[], int], watched: Callable[[], int],
                       stopped_ranks: Callable[[], int] = lambda: 0) -> None:
        """Gauges read from the live objects when scraped (never stale, nothing to keep in sync)."""
        self.guard_held.set_function(lambda: 1.0 if guard_live() else 0.0)
        self.guard_remaining.set_function(guard_remaining_sec)
        self.report_queue.set_function(report_queue)
        self.watched.set_function(watched)
        self.stopped_ranks.set_function(stopped_ranks)

    def poll(self, elapsed_sec: float, error: str = "") -> None:
        self.polls.inc()
        self.poll_seconds.observe(elapsed_sec)
        if error:
            self.poll_errors.labels(error).inc()

    def engine_http(self, route: str, sent_bytes: int, received_bytes: int) -> None:
        # The labelled children looked up once: this runs on every engine request.
        children = self._engine_http_children.get(route)
        if children is None:
            children = self._engine_http_children[route] = (
                self.engine_requests.labels(route), self.engine_bytes.labels(route, "sent"),
                self.engine_bytes.labels(route, "received"))
        children[0].inc()
        children[1].inc(sent_bytes)
        children[2].inc(received_bytes)

    def engine_exit(self, intentional: bool) -> None:
        self.engine_exits.labels("true" if intentional else "false").inc()

    def apply_call(self, outcome: str) -> None:
        self.apply_calls.labels(outcome).inc()

    def engine_apply(self, accepted: bool) -> None:
        self.engine_applies.labels("accepted" if accepted else "not_accepted").inc()
