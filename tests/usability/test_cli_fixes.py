"""Issue 22 items 5, 6, 8, 9 and 10: exit codes that mean what they say, `--explain` ties, a loopback
embedded server, tables that keep node names whole off a terminal, Node files typed clients accept."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from scheduler.cli import app
from tests.builders import make_nodelist, write_objects

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "fixtures" / "jobs"
RUNNER = CliRunner()


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    """A 32-node HGX H100 cluster file."""
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=32))


# ----- item 5: optimal past its limits is bad input, not an unschedulable gang; run refuses cp > 1 up front
def test_optimal_past_its_size_limit_exits_2_and_names_another_policy(cluster_file):
    job = str(ROOT / "manifests" / "example-pytorchjob.yaml")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", job, "--policy", "optimal"])
    assert result.exit_code == 2, result.output
    assert "optimal: instance too large" in result.stderr and "use another policy" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    placed = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", job, "--policy", "meshfit"])
    assert placed.exit_code == 0, "the same gang fits under meshfit"


def test_run_refuses_a_layout_the_local_runtime_cannot_train_with_exit_2_before_any_progress(cluster_file, tmp_path):
    pytest.importorskip("torch")
    job = tmp_path / "cp.yaml"
    job.write_text((JOBS / "indexed-job.yaml").read_text().replace('"tp=2,dp=4"', '"tp=2,cp=2,dp=2"'))
    result = RUNNER.invoke(app, ["run", "--cluster", str(cluster_file), "--job", str(job)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: the local example model trains tp, pp and dp only")
    assert "training" not in result.output and len(result.stderr.strip().splitlines()) == 1


# ----- item 6: --explain says "tie" and finishes its sentence
def test_explain_with_a_tied_runner_up_says_tie_and_names_both_layouts(cluster_file):
    args = ["place", "--cluster", str(cluster_file), "--job", str(JOBS / "pytorchjob.yaml"), "--explain"]
    table = RUNNER.invoke(app, args)
    assert table.exit_code == 0, table.output
    why = " ".join(table.stdout.split("why:")[1].split())
    assert why.startswith("tie: both layouts predict") and not why.endswith("chose")
    assert " over leaf su-000 (" in why and why.endswith("more)")
    rows = [line for line in table.stdout.splitlines() if line.startswith("│ ") and "tie" in line]
    assert len(rows) == 6, "every axis and the total say tie"
    document = json.loads(RUNNER.invoke(app, [*args, "-o", "json"]).stdout)
    assert document["explain"]["comparison"]["tie"] is True


# ----- item 8: the embedded server is loopback-only unless --host says otherwise
@pytest.mark.parametrize("flags,expected", [
    ([], "127.0.0.1"),
    (["--host", "0.0.0.0"], "0.0.0.0"),
], ids=["default-loopback", "explicit-host"])
def test_embedded_serve_binds_loopback_by_default(cluster_file, monkeypatch, flags, expected):
    from scheduler.service.ops import server

    seen = []

    def refuse(host, port):
        """Record the address and stop before anything listens."""
        seen.append(host)
        raise server.PortError("stop here")

    monkeypatch.setattr(server, "bind_http_socket", refuse)
    result = RUNNER.invoke(app, ["serve", "--cluster", str(cluster_file), "--port", "0", *flags])
    assert result.exit_code == 2 and seen == [expected]


def test_real_mode_still_listens_on_every_interface():
    from scheduler.cli.serve_cmd import default_host

    assert default_host(None) == "0.0.0.0" and default_host(Path("c.json")) == "127.0.0.1"


# ----- item 9: node names stay whole off a terminal and on narrow ones
@pytest.mark.parametrize("width", [80, 40], ids=["ci-80-columns", "narrow"])
def test_demo_comparison_table_keeps_every_node_name_whole(width):
    from scheduler.cli.common import print_table
    from scheduler.cli.demo_cmd import DEMO_NODES, DEMO_PRESET, DEMO_USED_FRACTION, comparison_table, demo_gang
    from scheduler.cli.demo_cmd import place_with_each_policy
    from topology.generator import generate_cluster

    placements, _ = place_with_each_policy(demo_gang(), generate_cluster(DEMO_PRESET, DEMO_NODES, 0, DEMO_USED_FRACTION))
    sink = io.StringIO()
    print_table(comparison_table(placements), Console(file=sink, width=width, force_terminal=False))
    text = sink.getvalue()
    assert "..." not in text and "…" not in text
    for name, placement in placements.items():
        assert name in text and all(node in text for node in placement.pod_nodes), name


def test_place_table_in_a_pipe_keeps_node_names_whole(cluster_file):
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(JOBS / "pytorchjob.yaml")],
                           env={"COLUMNS": "30"})
    assert result.exit_code == 0 and "…" not in result.stdout
    assert all(f"dgx-h100-000{i}" in result.stdout for i in range(4))


# ----- item 10: generated Node files are accepted by the typed kubernetes client
def test_generated_nodes_and_pods_deserialize_with_the_typed_client(tmp_path):
    from kubernetes.client import ApiClient

    target = tmp_path / "c.json"
    result = RUNNER.invoke(app, ["cluster", "generate", "--preset", "gb200-nvl72", "--nodes", "20",
                                 "--used-fraction", "0.5", "--unhealthy", "2", "--to", str(target)])
    assert result.exit_code == 0, result.output
    client = ApiClient()
    items = json.loads(target.read_text())["items"]
    typed = [client.deserialize(json.dumps(item), f"V1{item['kind']}", "application/json") for item in items]
    nodes = [t for t in typed if type(t).__name__ == "V1Node"]
    assert len(nodes) == 20 and all(n.status.node_info.machine_id for n in nodes)
    assert len({n.status.node_info.system_uuid for n in nodes}) == 20
