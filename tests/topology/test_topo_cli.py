"""`meshfit cluster generate|presets` and `meshfit topology show|export`: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from typer.testing import CliRunner

from scheduler.cli import app

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nodes"
runner = CliRunner()


def invoke(*args: str):
    """Run the meshfit CLI in-process."""
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "cluster.json"
    result = invoke("cluster", "generate", "--preset", "gb200-nvl72", "--nodes", "40", "--seed", "3",
                    "--used-fraction", "0.25", "--unhealthy", "2", "--to", str(path))
    assert result.exit_code == 0, result.output
    return path


def test_generate_writes_a_list_with_pods(generated):
    document = json.loads(generated.read_text())
    kinds = {item["kind"] for item in document["items"]}
    assert (document["kind"], kinds) == ("List", {"Node", "Pod"})


def test_generate_to_stdout_is_a_nodelist():
    result = invoke("cluster", "generate", "--preset", "aws-p5", "--nodes", "3")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["kind"] == "NodeList"


def test_show_json_matches_design(generated):
    result = invoke("topology", "show", "--cluster", str(generated), "-o", "json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["levels"] == ["spine", "leaf", "nvlink", "host"]
    assert {"levels", "domains", "nodes"} <= set(document)
    assert sum(1 for n in document["nodes"] if not n["schedulable"]) == 2


def test_show_table_has_tree_levels_and_unschedulable(generated):
    result = invoke("topology", "show", "--cluster", str(generated), "--hosts")
    assert result.exit_code == 0
    assert "GPUs free" in result.stdout and "levels (outermost first)" in result.stdout
    assert "unschedulable node(s)" in result.stdout
    assert "gb200-r002-n03" in result.stdout


def test_toleration_flag_admits_cordoned_nodes():
    plain = json.loads(invoke("topology", "show", "--cluster", str(FIXTURES / "cordoned.json"), "-o", "json").stdout)
    tolerant = invoke("topology", "show", "--cluster", str(FIXTURES / "cordoned.json"), "-o", "json",
                      "--toleration", "node.kubernetes.io/unschedulable")
    schedulable = {n["name"] for n in json.loads(tolerant.stdout)["nodes"] if n["schedulable"]}
    assert {n["name"] for n in plain["nodes"] if n["schedulable"]} == {"ok-0"}
    assert schedulable == {"ok-0", "cordoned-0"}


def test_show_with_config_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("links:\n  spine: {oversubscription: 4}\n")
    result = invoke("topology", "show", "--cluster", str(FIXTURES / "topograph-old.yaml"), "--config", str(config),
                    "-o", "json")
    assert json.loads(result.stdout)["links"]["spine"]["oversubscription"] == 4


def test_export_graphml_and_dot(generated, tmp_path):
    graphml = tmp_path / "g.graphml"
    assert invoke("topology", "export", "--cluster", str(generated), "--format", "graphml", "--to", str(graphml)).exit_code == 0
    assert nx.read_graphml(graphml).number_of_nodes() > 40
    dot = invoke("topology", "export", "--cluster", str(generated), "--format", "dot")
    assert dot.exit_code == 0 and dot.stdout.startswith("digraph meshfit {")


def test_presets_json_lists_all_presets():
    result = invoke("cluster", "presets", "-o", "json")
    names = [p["name"] for p in json.loads(result.stdout)["presets"]]
    assert names == ["hgx-h100", "hgx-h200", "hgx-b200", "gb200-nvl72", "gke-a3", "aws-p5"]


ERROR_CASES = [
    ("bad-json", ["topology", "show", "--cluster", str(FIXTURES / "bad" / "not-json.json")], "not valid JSON"),
    ("not-nodelist", ["topology", "show", "--cluster", str(FIXTURES / "bad" / "not-nodelist.yaml")], "expected a NodeList"),
    ("negative", ["topology", "show", "--cluster", str(FIXTURES / "bad" / "negative-gpus.json"), "-o", "json"], "negative"),
    ("non-numeric", ["topology", "export", "--cluster", str(FIXTURES / "bad" / "non-numeric-gpus.yaml")], "not a number"),
    ("duplicate", ["topology", "show", "--cluster", str(FIXTURES / "bad" / "duplicate-names.json")], "duplicate node"),
    ("contradictory", ["topology", "show", "--cluster", str(FIXTURES / "bad" / "contradictory-parents.yaml")],
     "contradictory parents"),
    ("missing", ["topology", "show", "--cluster", "/nonexistent/cluster.json"], "cannot read"),
    ("bad-config", ["topology", "show", "--cluster", str(FIXTURES / "aws.json"), "--config",
                    str(FIXTURES / "bad" / "yaml-list.yaml")], "config"),
    ("bad-toleration", ["topology", "show", "--cluster", str(FIXTURES / "aws.json"), "--toleration", "k:Never"], "effect"),
    ("bad-preset", ["cluster", "generate", "--preset", "tpu-v5", "--nodes", "4"], "unknown preset"),
    ("bad-fraction", ["cluster", "generate", "--preset", "hgx-h100", "--nodes", "4", "--used-fraction", "2"],
     "used-fraction"),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_bad_input_exits_2_with_one_line(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_console_script_reports_bad_file_in_one_line():
    import shutil
    import subprocess
    import sys

    command = [shutil.which("meshfit")] if shutil.which("meshfit") else [sys.executable, "-c",
                                                                          "from scheduler.cli import main; main()"]
    completed = subprocess.run([*command, "topology", "show", "--cluster", str(FIXTURES / "bad" / "binary.json")],
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: ") and completed.stderr.count("\n") == 1
