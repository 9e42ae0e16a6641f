"""Strict input models: a typo in a topology config, link override, plan candidate or fabric config exits 2
with one line naming the closest valid key, instead of silently changing the result."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.handoff.fabric import FabricConfigError, load_fabric_config
from simulations.planner import PlanError, load_candidate
from topology.config import parse_config
from topology.model import TopologyError
from topology.strict import did_you_mean
from tests.builders import make_nodelist, write_objects

RUNNER = CliRunner()


def invoke(*args: str):
    return RUNNER.invoke(app, list(args))


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    for fragment in fragments:
        assert fragment in result.stderr


def test_did_you_mean_picks_the_closest_or_nothing():
    assert did_you_mean("lef", ["leaf", "spine"]) == "; did you mean 'leaf'?"
    assert did_you_mean("price", ["price_per_gpu_hour", "nodes"]) == "; did you mean 'price_per_gpu_hour'?"
    assert did_you_mean("zzz", ["leaf", "spine"]) == ""


@pytest.mark.parametrize("data,message", [
    ({"links": {"spine": {"oversubscripton": 4}}}, "links.spine.oversubscripton: unknown key; did you mean 'oversubscription'?"),
    ({"lnks": {}}, "lnks: unknown key; did you mean 'links'?"),
    ({"levels": [{"label": "x", "rol": "leaf"}]}, "levels.0.rol: unknown key; did you mean 'role'?"),
    ({"levels": [{"label": "x", "role": "lef"}]}, "unknown role 'lef'; did you mean 'leaf'?"),
    ({"profile": "hgx-h10"}, "unknown link profile 'hgx-h10'; did you mean 'hgx-h100'?"),
], ids=["link-field", "top-key", "level-key", "level-role", "profile"])
def test_topology_config_typos_name_the_closest_key(data, message):
    with pytest.raises(TopologyError) as caught:
        parse_config(data)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_config_file_link_key_naming_no_level_exits_2(tmp_path):
    cluster = write_objects(tmp_path, make_nodelist("hgx-h100", nodes=4))
    config = tmp_path / "config.yaml"
    config.write_text("links:\n  spnie: {oversubscription: 4}\n")
    one_line_error(invoke("topology", "show", "--cluster", str(cluster), "--config", str(config)),
                   "link override 'spnie'", "did you mean 'spine'?")


@pytest.mark.parametrize("link,hint", [
    ("lef.oversubscription=4", "did you mean 'leaf'?"),
    ("leaf.oversubscripton=4", "did you mean 'oversubscription'?"),
], ids=["level", "field"])
def test_simulate_link_typos_exit_2(link, hint):
    one_line_error(invoke("simulate", "--preset", "hgx-h100", "--nodes", "4", "--synthetic", "5", "--link", link), hint)


@pytest.mark.parametrize("body,message", [
    ("preset: hgx-h100\nnodes: 4\nlinks: {spnie: {oversubscription: 4}}\n", "did you mean 'spine'?"),
    ("preset: hgx-h100\nnode: 4\n", "node: unknown key; did you mean 'nodes'?"),
    ("preset: hgx-h100\nnodes: 4\nprice: 2\n", "did you mean 'price_per_gpu_hour'?"),
], ids=["link-level", "key", "prefix"])
def test_plan_candidate_typos_exit_2(tmp_path, body, message):
    candidate = tmp_path / "c.yaml"
    candidate.write_text(body)
    one_line_error(invoke("plan", "--candidate", str(candidate), "--synthetic", "5", "--workers", "1"), message)


def test_candidate_models_are_strict(tmp_path):
    candidate = tmp_path / "c.yaml"
    candidate.write_text("preset: hgx-h100\nnodes: '4'\n")
    with pytest.raises(PlanError, match="nodes: Input should be a valid integer"):
        load_candidate(candidate)


def test_plan_without_a_workload_names_its_own_options(tmp_path):
    candidate = tmp_path / "c.yaml"
    candidate.write_text("preset: hgx-h100\nnodes: 4\n")
    result = invoke("plan", "--candidate", str(candidate))
    one_line_error(result, "--trace", "--synthetic")
    help_text = invoke("plan", "--help").stdout
    assert "--trace" in help_text


def test_fabric_config_typo_names_the_closest_key(tmp_path):
    path = tmp_path / "fabric.yaml"
    path.write_text("fabrics:\n  - name: ib\n    mach: {a: b}\n")
    with pytest.raises(FabricConfigError, match="fabrics.0.mach: unknown key; did you mean 'match'"):
        load_fabric_config(path)
