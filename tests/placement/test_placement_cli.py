"""`meshfit place`: DESIGN.md JSON, table view and exit codes (0 placed, 3 unschedulable, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from tests.builders import make_nodelist, write_objects

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
RUNNER = CliRunner()


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=8))


def _place(*args: str):
    return RUNNER.invoke(app, ["place", *args])


def test_json_follows_the_design_contract(cluster_file):
    result = _place("--cluster", str(cluster_file), "--job", str(JOBS / "pytorchjob.yaml"), "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["job", "status", "reason", "policy", "world_size", "parallelism", "rank_order", "pods",
                         "ranks", "cost", "warnings"]
    assert (doc["job"], doc["status"], doc["policy"], doc["world_size"]) == ("research/llama-70b", "placed", "meshfit", 32)
    assert set(doc["pods"][0]) == {"index", "name", "node", "ranks"} and doc["pods"][0]["ranks"] == list(range(8))
    assert set(doc["ranks"][0]) == {"rank", "pod_index", "node", "local_rank", "coords"}
    assert set(doc["ranks"][0]["coords"]) == {"tp", "cp", "ep", "dp", "pp"}
    assert set(doc["cost"]) == {"step_comm_seconds", "lower_bound_seconds", "by_axis", "tier_by_axis"}
    assert doc["cost"]["tier_by_axis"]["tp"] == "host"


@pytest.mark.parametrize("policy", ["meshfit", "kueue-tas", "volcano-hypernode", "random", "first-fit", "optimal"],
                         ids=str)
def test_every_policy_is_one_flag_away(cluster_file, policy):
    result = _place("--cluster", str(cluster_file), "--job", str(JOBS / "volcano-job.yaml"), "--policy", policy,
                    "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == policy


def test_table_shows_pods_ranks_tiers_and_lower_bound(cluster_file):
    result = _place("--cluster", str(cluster_file), "--job", str(JOBS / "jobset.yaml"))
    assert result.exit_code == 0, result.output
    for text in ("gpt-jobset-workers-0-0", "0-3", "lower bound", "tier", "dp"):
        assert text in result.stdout


def test_unschedulable_exits_3_with_the_reason(cluster_file, tmp_path):
    job = (JOBS / "pytorchjob.yaml").read_text().replace("replicas: 3", "replicas: 15").replace("dp=2", "dp=8")
    path = tmp_path / "big.yaml"
    path.write_text(job)
    result = _place("--cluster", str(cluster_file), "--job", str(path), "-o", "json", "--explain")
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "unschedulable" and "needs 128 GPUs" in doc["reason"]
    assert doc["explain"]["summary"].startswith("unschedulable:")
    assert doc["explain"]["binding_constraint"] == "free-gpus"


@pytest.mark.parametrize("job,cluster,policy,message", [
    ("bad-world-size.yaml", None, "meshfit", "tp*cp*ep*pp*dp = 32"),
    ("bad-kind.yaml", None, "meshfit", "unsupported job kind"),
    ("pytorchjob.yaml", "missing.json", "meshfit", "missing.json"),
    ("pytorchjob.yaml", None, "no-such-policy", "unknown policy"),
], ids=["world-size", "kind", "missing-cluster", "unknown-policy"])
def test_bad_input_exits_2_with_one_line(cluster_file, tmp_path, job, cluster, policy, message):
    cluster_path = str(tmp_path / cluster) if cluster else str(cluster_file)
    result = _place("--cluster", cluster_path, "--job", str(JOBS / job), "--policy", policy)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
