"""deploy/dashboards/motor.json and deploy/prometheus/motor-rules.yaml against what the services export:
every metric and label they name exists, every expression is valid PromQL, and the alert rules pass
their promtool unit tests (deploy/prometheus/motor-rules.test.yaml). promtool comes from Debian's
`prometheus` package (`make deps` installs it); without it the promtool checks skip and say so."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from motor.common.cert_reload import CertificateExpiryCollector
from motor.controller.metrics import ControllerMetrics
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.routing import RoutingTable
from motor.coordinator.serving_view import EndpointSpec, InstanceSpec, RefreshEvent
from nodemanager.metrics import NodeManagerMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "dashboards" / "motor.json"
RULES = ROOT / "deploy" / "prometheus" / "motor-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "motor-rules.test.yaml"
# Set by Prometheus on every scraped series, or by histogram buckets.
TARGET_LABELS = {"job", "instance", "le"}
# Grafana's variables, replaced by something PromQL accepts.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$instance_id": ".*"}
PROMQL_WORDS = {"by", "on", "without", "ignoring", "group_left", "group_right"}


def exported() -> tuple[set[str], set[str]]:
    """(sample names, label names) every Motor service can export."""
    table = RoutingTable()
    table.refresh(RefreshEvent.ADD, [InstanceSpec(1, "m", (EndpointSpec(0, "127.0.0.1", 8000),))], 1)
    coordinator = CoordinatorMetrics()
    coordinator.watch_table(table)
    # Every process with `security` adds its certificates' expiry gauge (motor.common.cert_reload).
    coordinator.registry.register(CertificateExpiryCollector([]))
    names: set[str] = set()
    labels = set(TARGET_LABELS)
    for owner in (ControllerMetrics(), NodeManagerMetrics(), coordinator):
        for family in owner.registry.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
            for sample in family.samples:
                labels.update(sample.labels)
        labels.update(label for metric in vars(owner).values() if isinstance(metric, MetricWrapperBase)
                      for label in metric._labelnames)
    return names, labels


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in doc["templating"]["list"] if v.get("definition")]
    return exprs


def rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def names_in(expr: str) -> set[str]:
    return set(re.findall(r"\bmotor_[a-z0-9_]+\b", expr))


def labels_in(expr: str) -> set[str]:
    found = set()
    for selector in re.findall(r"\{([^}]*)\}", expr):
        found.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", selector))
    for clause in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        found.update(x.strip() for x in clause.split(",") if x.strip())
    for clause in re.findall(r"label_values\(\s*[a-z0-9_]+\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", expr):
        found.add(clause)
    return found - PROMQL_WORDS


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_metric_and_label_named_is_exported(source: str) -> None:
    names, labels = exported()
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    assert exprs
    used = set().union(*(names_in(e) for e in exprs))
    assert used and not used - names, sorted(used - names)
    used_labels = set().union(*(labels_in(e) for e in exprs))
    assert not used_labels - labels, sorted(used_labels - labels)


def test_the_dashboard_covers_every_service() -> None:
    used = set().union(*(names_in(e) for e in dashboard_exprs()))
    for prefix, count in (("motor_coordinator_", 8), ("motor_nodemanager_", 8)):
        assert len({n for n in used if n.startswith(prefix)}) >= count, prefix
    assert {"motor_ft_phase", "motor_fallback_total", "motor_scale_down_stage_seconds_bucket"} <= used
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in doc["panels"] if p["type"] != "row")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`; `make deps` installs it): "
                    "the PromQL and alert-rule unit tests did not run")
    return found


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", str(RULES)], check=False, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], check=False, capture_output=True, text=True, timeout=120,
                           cwd=RULE_TESTS.parent)
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr


def test_every_dashboard_expression_is_valid_promql(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = []
    for i, expr in enumerate(e for e in dashboard_exprs() if not e.startswith("label_values(")):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"motor:dashboard_panel:{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run([promtool, "check", "rules", str(path)], check=False, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
