"""`meshfit place --explain`: the binding constraint named right, per-level capacity, chosen vs runner-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.placement.engine import place
from scheduler.placement.explain import RESERVATION_PREFIX, binding_constraint, explain, explain_report
from scheduler.placement.explain_layout import compare_with_runner_up
from scheduler.gangs.ledger import reservation_key
from tests.builders import make_nodelist, write_objects
from tests.placement.placement_builders import make_cluster, make_gang

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "example-pytorchjob.yaml"
RUNNER = CliRunner()


def test_gb200_example_names_gpus_per_node_not_fragmentation(tmp_path):
    cluster = write_objects(tmp_path, make_nodelist("gb200-nvl72", nodes=36))
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(EXAMPLE), "-o", "json", "--explain"])
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    assert "no node has 8 GPUs" in doc["reason"] and "GPUs per node" in doc["reason"]
    assert "fragmented" not in doc["reason"] and "(e.g. 32 pods x 4)" in doc["reason"]
    assert doc["explain"]["binding_constraint"] == "gpus-per-node"


def test_gpus_per_node_wins_even_when_the_cluster_is_short_of_gpus(tmp_path):
    cluster = write_objects(tmp_path, make_nodelist("gb200-nvl72", nodes=8))
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(EXAMPLE)])
    assert result.exit_code == 3 and "GPUs per node" in result.stdout


@pytest.mark.parametrize("topo_kwargs,gang_kwargs,kind,fragment", [
    ({"racks": 1, "nodes": 4, "used": {0: 4, 1: 4, 2: 4, 3: 4}}, {"tp": 8, "dp": 2}, "fragmentation",
     "16 GPUs are free but only 0 pod(s) of 8 GPUs fit"),
    ({"racks": 1, "nodes": 2}, {"tp": 8, "dp": 4}, "free-gpus", "only 16 free"),
    ({"racks": 2, "nodes": 2}, {"tp": 8, "dp": 3, "required": "rack"}, "required-level",
     "even empty no rack domain holds more than 16"),
    ({"racks": 2, "nodes": 4, "used": {0: 8, 4: 8}}, {"tp": 8, "dp": 4, "required": "rack"}, "required-level",
     "busy now"),
    ({"racks": 2, "nodes": 2}, {"tp": 8, "dp": 2}, None, None),
], ids=["fragmented", "short", "level-too-small", "level-busy", "fits"])
def test_binding_constraint_kinds(topo_kwargs, gang_kwargs, kind, fragment):
    found, sentence = binding_constraint(make_gang(**gang_kwargs), make_cluster(**topo_kwargs))
    assert found == kind
    assert sentence is None if fragment is None else fragment in sentence


def test_reservations_are_named_by_holder():
    assert reservation_key("ns/other", 0).startswith(RESERVATION_PREFIX)
    topo = make_cluster(racks=1, nodes=2)
    topo.add_pod(reservation_key("ns/other", 0), "node-000", 8)
    topo.add_pod(reservation_key("ns/job", 0), "node-001", 4)
    text = explain(make_gang(tp=8, dp=2), topo)
    assert text.startswith("unschedulable:") and "held by reservations of ns/other (8)" in text
    assert "ns/job" not in text.split("reservations of", 1)[1]


def test_levels_list_free_gpus_and_pod_slots_of_the_best_domains():
    topo = make_cluster(racks=2, nodes=2, used={0: 8})
    report = explain_report(make_gang(tp=8, dp=2), topo)
    rack = next(row for row in report["levels"] if row["level"] == "rack")
    assert rack["domains"] == 2 and rack["fitting_domains"] == 1
    assert rack["best"][0] == {"domain": "s0-r1", "gpus_free": 16, "gpus_total": 16, "pod_slots": 2, "fits": True}
    assert rack["best"][1]["pod_slots"] == 1 and not rack["best"][1]["fits"]


def test_runner_up_comparison_names_the_chosen_domain_and_the_axis_saved():
    topo = make_cluster(racks=2, nodes=4, used={0: 8, 1: 8})
    gang = make_gang(tp=8, dp=3)
    chosen = place(gang, topo, "meshfit")
    free_before = topo.gpus_free
    comparison = compare_with_runner_up(gang, topo, "meshfit", chosen)
    assert topo.gpus_free == free_before
    assert comparison["chosen"]["domain"] == "s0-r1" and comparison["runner_up"]["domain"] == "s0"
    assert comparison["runner_up"]["tier_by_axis"]["dp"] == "spine" and comparison["chosen"]["tier_by_axis"]["dp"] == "rack"
    assert "cheaper" in comparison["why"] and "dp" in comparison["why"]
    report = explain_report(gang, topo, chosen, comparison)
    assert "rack domain s0-r1" in report["summary"]


def test_explain_table_shows_levels_and_the_runner_up(tmp_path):
    cluster = write_objects(tmp_path, make_nodelist("hgx-h100", nodes=8))
    job = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "jobset.yaml"
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(job), "--explain"])
    assert result.exit_code == 0, result.output
    for text in ("best domains per level", "pod slots", "runner-up", "why:"):
        assert text in result.stdout


@pytest.mark.parametrize("preset", ["hgx-h100", "gke-a3", "aws-p5"])
def test_required_level_by_role_works_on_every_label_scheme(preset, tmp_path):
    cluster = write_objects(tmp_path, make_nodelist(preset, nodes=16))
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(EXAMPLE), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "placed"
