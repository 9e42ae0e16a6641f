"""The monitoring component's alerts evaluated by Prometheus's own `promtool`: `check rules` parses every
expression and annotation template, and `test rules` feeds synthetic series and checks each alert fires when it
should (with its labels) and stays silent when it should not.  promtool comes with Debian's `prometheus`
package (`$MESHFIT_PROMTOOL`, else `promtool` on the PATH); skipped with the reason when absent.
(tests/kube/test_alert_rules.py checks the metric names against a live meshfit without promtool.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.kube.kustomize_render import render

CRITICAL, WARNING = {"severity": "critical"}, {"severity": "warning"}
NS = 'namespace="meshfit-system"'
CASES = {
    # alert: [(input series {series: values}, eval time, expected alerts' labels (beyond severity)), ...]
    "MeshfitNoLeader": [
        ({f'meshfit_leader{{{NS},pod="a"}}': "0x10", f'meshfit_leader{{{NS},pod="b"}}': "0x10"}, "5m", [CRITICAL]),
        ({"some_other_metric": "1x10"}, "5m", [CRITICAL]),  # nothing scraped at all
        ({f'meshfit_leader{{{NS},pod="a"}}': "1x10", f'meshfit_leader{{{NS},pod="b"}}': "0x10"}, "5m", []),
        ({f'meshfit_leader{{{NS},pod="a"}}': "0x10"}, "1m", []),  # not for 2 minutes yet
    ],
    "MeshfitMultipleLeaders": [
        ({f'meshfit_leader{{{NS},pod="a"}}': "1x10", f'meshfit_leader{{{NS},pod="b"}}': "1x10"}, "5m",
         [{**CRITICAL, "namespace": "meshfit-system"}]),
        ({'meshfit_leader{namespace="a",pod="a"}': "1x10", 'meshfit_leader{namespace="b",pod="b"}': "1x10"}, "5m", []),
    ],
    "MeshfitGangWaitingTooLong": [
        ({'meshfit_gang_oldest_seconds{state="waiting"}': "3000+60x30"}, "20m", [WARNING]),
        ({'meshfit_gang_oldest_seconds{state="waiting"}': "3000+60x30"}, "13m", []),  # over 1 h since 11m, for 5m
        ({'meshfit_gang_oldest_seconds{state="bound"}': "9000+60x30"}, "20m", []),  # only waiting gangs count
    ],
    "MeshfitBindingsFailing": [
        ({'meshfit_binding_seconds_count{by="meshfit",outcome="failed"}': "0+2x40",
          'meshfit_binding_seconds_count{by="meshfit",outcome="bound"}': "0+8x40"}, "30m", [WARNING]),
        ({'meshfit_binding_seconds_count{by="meshfit",outcome="failed"}': "0+1x40",
          'meshfit_binding_seconds_count{by="meshfit",outcome="bound"}': "0+19x40"}, "30m", []),  # 5%
        ({'meshfit_binding_seconds_count{by="meshfit",outcome="bound"}': "0x40"}, "30m", []),  # no Bindings at all
    ],
    "MeshfitRankTablePublishFailing": [
        ({"meshfit_rank_table_publish_failures_total": "0+1x40"}, "30m", [WARNING]),
        ({"meshfit_rank_table_publish_failures_total": "0+1x10 10x30"}, "30m", []),  # stopped failing
    ],
    "MeshfitGangsRolledBack": [
        ({'meshfit_gang_transitions_total{transition="rolled-back"}': "0+1x60"}, "30m", [WARNING]),
        ({'meshfit_gang_transitions_total{transition="rolled-back"}': "0+0.05x60"}, "30m", []),
        ({'meshfit_gang_transitions_total{transition="bound"}': "0+1x60"}, "30m", []),
    ],
    "MeshfitExtenderSlow": [
        ({'meshfit_request_seconds_bucket{verb="filter",le="1.0"}': "0x30",
          'meshfit_request_seconds_bucket{verb="filter",le="2.5"}': "0+10x30",
          'meshfit_request_seconds_bucket{verb="filter",le="+Inf"}': "0+10x30"}, "20m", [{**WARNING, "verb": "filter"}]),
        ({'meshfit_request_seconds_bucket{verb="filter",le="0.1"}': "0+10x30",
          'meshfit_request_seconds_bucket{verb="filter",le="1.0"}': "0+10x30",
          'meshfit_request_seconds_bucket{verb="filter",le="+Inf"}': "0+10x30"}, "20m", []),
    ],
    "MeshfitUnexpectedGangTransition": [
        ({'meshfit_gang_transitions_total{transition="unexpected"}': "0 0 0 1 1 1 1 1"}, "6m", [WARNING]),
        ({'meshfit_gang_transitions_total{transition="unexpected"}': "0x8"}, "6m", []),
    ],
    "MeshfitMetricsCollectorFailing": [
        ({'meshfit_scrape_errors_total{collector="state"}': "0+1x20"}, "10m", [{**WARNING, "collector": "state"}]),
        ({'meshfit_scrape_errors_total{collector="state"}': "3x20"}, "10m", []),
    ],
}


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool binary, or a skip with the reason."""
    found = os.environ.get("MESHFIT_PROMTOOL") or shutil.which("promtool")
    if not found:
        pytest.skip("no promtool: set MESHFIT_PROMTOOL or install it (Debian: apt-get install prometheus)")
    return found


def rule_groups() -> list[dict]:
    """The PrometheusRule's groups, as a Prometheus rule file holds them."""
    (rule,) = [o for o in render(("monitoring",)) if o["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """promtool with `args` in `cwd`."""
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_accepts_every_expression_and_template(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    result = run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = rule_groups()
    broken[0]["rules"][0]["expr"] = "sum(meshfit_leader"  # teeth: a PromQL syntax error is refused
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({"groups": broken}))
    assert run(promtool, "check", "rules", "broken.yaml", cwd=tmp_path).returncode != 0


def test_every_alert_has_cases():
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    assert alerts == set(CASES)
    assert all(any(expected for _, _, expected in cases) and any(not e for _, _, e in cases) for cases in CASES.values())


@pytest.mark.parametrize("alert", sorted(CASES))
def test_alert_fires_exactly_when_it_should(promtool, tmp_path, alert):
    groups = rule_groups()
    for group in groups:  # annotations are templates checked above; the unit test compares labels only
        group["rules"] = [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = [{"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
              "alert_rule_test": [{"eval_time": at, "alertname": alert,
                                   "exp_alerts": [{"exp_labels": labels} for labels in expected]}]}
             for series, at, expected in CASES[alert]]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                          "tests": tests}))
    result = run(promtool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
