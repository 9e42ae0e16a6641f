"""The monitoring component's PrometheusRule: the alerts the platform needs exist, every metric their
expressions name is exported by a live `meshfit serve` (its /metrics on --metrics-port, what the ServiceMonitor
scrapes), and every alert has a runbook section in docs/troubleshooting.md that its runbook_url points at.
(Rendered with every other combination, and dry-run against a real API server, in
tests/realk8s/test_kustomize_real.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kube.kustomize_render import render
from tests.service.test_serve_cli import free_port
from tests.service.tls_served import Served, call

REPO = Path(__file__).resolve().parents[2]
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
RUNBOOK_BASE = "https://github.com/meshfit/meshfit/blob/main/docs/troubleshooting.md"
REQUIRED_ALERTS = {"MeshfitGangWaitingTooLong", "MeshfitNoLeader", "MeshfitRankTablePublishFailing",
                   "MeshfitBindingsFailing"}
"""What issue 26 asked for: gangs waiting too long, no leader, rank-table publish failures, Bindings failing."""
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "inf", "nan"}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("", "_count", "_sum", "_created"), "gauge": ("",), "info": ("_info",),
            "stateset": ("",), "gaugehistogram": ("_bucket", "_gcount", "_gsum"), "unknown": ("",)}


def alert_rules() -> list[dict]:
    """Every alerting rule of the monitoring component's PrometheusRule."""
    (rule,) = [o for o in render(("monitoring",)) if o["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers, ranges,
    grouping clauses and numbers are removed, that are neither a keyword nor called as a function."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', " ", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        name, called = match.group(1), match.group(2)
        if not called and name.lower() not in KEYWORDS and not re.fullmatch(r"\d+[smhdwy]", name):
            names.add(name)
    return names


def exported_names(exposition: str) -> set[str]:
    """Every sample name a text exposition declares (families without samples yet included), by type."""
    return {family.name + suffix for family in text_string_to_metric_families(exposition)
            for suffix in SUFFIXES[family.type]}


def test_metric_names_are_read_from_promql_without_functions_labels_or_keywords():
    expr = ('sum by (verb) (rate(meshfit_a_total{outcome="failed", le=~"x|y"}[10m])) / on(verb) group_left '
            "histogram_quantile(0.99, sum without (pod) (rate(meshfit_b_bucket[5m] offset 1h))) > bool 1 "
            "or vector(0) and absent(up_thing) unless max_over_time(meshfit_c[1h:5m])")
    assert promql_metric_names(expr) == {"meshfit_a_total", "meshfit_b_bucket", "up_thing", "meshfit_c"}
    assert promql_metric_names("(sum(meshfit_leader) or vector(0)) < 1") == {"meshfit_leader"}


@pytest.fixture(scope="module")
def live_exposition(tmp_path_factory) -> str:
    """/metrics of a live `meshfit serve --cluster` on loopback, from its --metrics-port."""
    tmp = tmp_path_factory.mktemp("metrics")
    metrics_port = free_port()
    served = Served(tmp, "--metrics-port", str(metrics_port)).wait(None)
    try:
        status, body, _ = call(metrics_port, "GET", "/metrics")
        assert status == 200, body[:200]
        return body.decode()
    finally:
        served.stop()


def test_every_metric_in_the_alert_expressions_is_exported_by_a_live_meshfit(live_exposition):
    exported = exported_names(live_exposition)
    assert {"meshfit_leader", "meshfit_gang_oldest_seconds", "meshfit_binding_seconds_count",
            "meshfit_rank_table_publish_failures_total"} <= exported
    used = {}
    for rule in alert_rules():
        names = promql_metric_names(str(rule["expr"]))
        assert names, f"{rule['alert']}: no metric found in {rule['expr']!r}"
        used[rule["alert"]] = names
    missing = {alert: sorted(names - exported) for alert, names in used.items() if names - exported}
    assert not missing, f"alerts on metrics meshfit does not export: {missing}"


def test_the_check_has_teeth_a_misspelt_metric_is_not_exported(live_exposition):
    exported = exported_names(live_exposition)
    assert promql_metric_names("sum(rate(meshfit_binding_second_count[5m])) > 0") - exported == {
        "meshfit_binding_second_count"}


def markdown_anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces to dashes)."""
    anchors = set()
    for line in text.splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def test_the_alerts_asked_for_exist_each_with_a_runbook_section():
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)) and REQUIRED_ALERTS <= set(names)
    doc = TROUBLESHOOTING.read_text()
    anchors = markdown_anchors(doc)
    for rule in rules:
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations), rule["alert"]
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == RUNBOOK_BASE and anchor == rule["alert"].lower(), annotations["runbook_url"]
        assert anchor in anchors, f"docs/troubleshooting.md has no section for {rule['alert']}"
        section = doc.split(f"### {rule['alert']}\n", 1)[1].split("\n### ", 1)[0]
        for metric in promql_metric_names(str(rule["expr"])):  # the runbook says what the alert reads
            family = re.sub(r"_(total|count|bucket|sum)$", "", metric)
            assert family in section, f"{rule['alert']}'s runbook does not name {family}"
        assert rule["labels"]["severity"] in {"critical", "warning"}
