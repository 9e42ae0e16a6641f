"""One output convention for every command: `-o table|json|yaml` prints, `--to FILE` / `--out-dir DIR` write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.cli import app
from simulations.traces import DATA_DIR
from tests.builders import make_nodelist, write_objects

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
TRACE = str(DATA_DIR / "philly-gavel" / "23dbec.trace")
RUNNER = CliRunner()


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=8))


def invoke(*args: str):
    return RUNNER.invoke(app, list(args))


def test_version_prints_the_package_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("meshfit ") and result.stdout.strip() != "meshfit"


@pytest.mark.parametrize("command", [
    ["cluster", "presets"],
    ["topology", "show", "--cluster", "CLUSTER"],
    ["place", "--cluster", "CLUSTER", "--job", str(JOBS / "jobset.yaml")],
], ids=lambda c: " ".join(c[:2]))
def test_json_and_yaml_print_the_same_document(cluster_file, command):
    args = [str(cluster_file) if a == "CLUSTER" else a for a in command]
    as_json = invoke(*args, "-o", "json")
    as_yaml = invoke(*args, "-o", "yaml")
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, as_yaml.output
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout)


def test_cluster_generate_prints_yaml_or_writes_the_to_file(tmp_path):
    printed = invoke("cluster", "generate", "--preset", "aws-p5", "--nodes", "2", "-o", "yaml")
    assert printed.exit_code == 0 and yaml.safe_load(printed.stdout)["kind"] == "NodeList"
    target = tmp_path / "nodes.yaml"
    written = invoke("cluster", "generate", "--preset", "aws-p5", "--nodes", "2", "--to", str(target))
    assert written.exit_code == 0 and written.stdout == ""
    assert yaml.safe_load(target.read_text()) == yaml.safe_load(printed.stdout)


def test_old_file_spelling_of_o_is_refused_not_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("cluster", "generate", "--preset", "aws-p5", "--nodes", "2", "-o", "nodes.json")
    assert result.exit_code == 2
    assert not (tmp_path / "nodes.json").exists()


def test_simulate_o_json_prints_and_creates_no_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("simulate", "--preset", "hgx-h100", "--nodes", "4", "--trace", TRACE, "--policy", "first-fit",
                    "-o", "json", "--no-plots")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policies"]["first-fit"]["jobs"] == 9
    assert list(tmp_path.iterdir()) == []


def test_simulate_out_dir_writes_files_and_yaml_prints(tmp_path):
    result = invoke("simulate", "--preset", "hgx-h100", "--nodes", "4", "--trace", TRACE, "--policy", "first-fit",
                    "-o", "yaml", "--out-dir", str(tmp_path / "out"), "--no-plots")
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert yaml.safe_load(result.stdout) == written


def test_topology_export_prints_dot_or_writes_graphml(cluster_file, tmp_path):
    dot = invoke("topology", "export", "--cluster", str(cluster_file), "-o", "dot")
    assert dot.exit_code == 0 and dot.stdout.startswith(("graph", "digraph", "strict"))
    target = tmp_path / "topo.graphml"
    graphml = invoke("topology", "export", "--cluster", str(cluster_file), "--to", str(target))
    assert graphml.exit_code == 0 and "<graphml" in target.read_text()


def test_render_json_is_a_list_of_the_yaml_documents(cluster_file, tmp_path):
    placed = invoke("place", "--cluster", str(cluster_file), "--job", str(JOBS / "jobset.yaml"), "-o", "json")
    placement = tmp_path / "placement.json"
    placement.write_text(placed.stdout)
    args = ["render", "--job", str(JOBS / "jobset.yaml"), "--placement", str(placement)]
    as_yaml, as_json = invoke(*args), invoke(*args, "-o", "json")
    assert as_yaml.exit_code == 0 and as_json.exit_code == 0, as_json.output
    listed = json.loads(as_json.stdout)
    assert listed["kind"] == "List" and listed["items"] == list(yaml.safe_load_all(as_yaml.stdout))
