"""/metrics of every service of a local cluster, scraped and parsed: every family of every service
must parse, with motor_ names, bounded labels and the families each service is required to export;
then sums and deltas of the samples, so a row can check that its counters moved by exactly what it
did."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# What each service must export (family names as the parser gives them: counters without _total).
REQUIRED = {
    "controller": {"motor_ft_phase", "motor_ft_transitions", "motor_strategy_runs", "motor_fallback",
                   "motor_scale_down_stage_seconds", "motor_fault_to_published_seconds", "motor_alive_dp_ranks",
                   "motor_dead_committed_ranks", "motor_evidence", "motor_publish_failures", "motor_gate_rejections",
                   "motor_hardware_faults", "motor_can_serve", "motor_serving_published"},
    "coordinator": {"motor_coordinator_requests", "motor_coordinator_request_seconds", "motor_coordinator_retries",
                    "motor_coordinator_held_requests", "motor_coordinator_hold_seconds",
                    "motor_coordinator_routable_endpoints", "motor_coordinator_in_flight_requests"},
    "nodemanager": {"motor_nodemanager_status_polls", "motor_nodemanager_status_poll_seconds",
                    "motor_nodemanager_status_poll_errors", "motor_nodemanager_fault_reports_sent",
                    "motor_nodemanager_fault_reports_taken",
                    "motor_nodemanager_fault_report_retries", "motor_nodemanager_fault_reports_dropped",
                    "motor_nodemanager_engine_exits", "motor_nodemanager_guard_held",
                    "motor_nodemanager_apply_calls", "motor_nodemanager_engine_applies"},
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_all(cluster) -> dict[str, Samples]:
    """Every service's samples; each exposition must parse, with motor_ names and bounded labels."""
    out: dict[str, Samples] = {}
    for name in cluster.metrics_urls():
        families = list(text_string_to_metric_families(cluster.scrape(name)))
        kind = name.split("-")[0]
        assert REQUIRED[kind] <= {f.name for f in families}, (name, REQUIRED[kind] - {f.name for f in families})
        for family in families:
            assert family.name.startswith("motor_"), (name, family.name)
            for sample in family.samples:
                assert not {"request_id", "instance"} & set(sample.labels), (name, sample)
        out[name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return out


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def nm_total(scrapes: dict[str, Samples], name: str, **labels: str) -> float:
    return sum(total(s, name, **labels) for svc, s in scrapes.items() if svc.startswith("nodemanager-"))


def delta(after, before, fn, *args, **labels) -> float:
    return fn(after, *args, **labels) - fn(before, *args, **labels)
