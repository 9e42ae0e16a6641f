"""`meshfit place` says in one line when every policy ties, and why; it says nothing when layouts differ."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.cli import app
from tests.builders import make_nodelist, write_objects

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()


def _job(tmp_path: Path, pods: int, gpus: int, parallelism: str) -> Path:
    manifest = yaml.safe_load((ROOT / "manifests" / "examples" / "indexed-job.yaml").read_text(encoding="utf-8"))
    manifest = copy.deepcopy(manifest)
    manifest["spec"]["completions"] = manifest["spec"]["parallelism"] = pods
    template = manifest["spec"]["template"]
    template["metadata"]["annotations"] = {"meshfit.io/parallelism": parallelism}
    template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def _place(tmp_path: Path, cluster: Path, job: Path) -> str:
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(job)], terminal_width=400)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_whole_node_pods_on_an_empty_leaf_tie_with_a_reason(tmp_path):
    cluster = write_objects(tmp_path, make_nodelist("hgx-h100", nodes=8))
    out = _place(tmp_path, cluster, _job(tmp_path, 2, 8, "tp=8,dp=2"))
    lines = [line for line in out.splitlines() if line.startswith("every policy ties")]
    assert len(lines) == 1
    assert "whole-node pods" in lines[0] and "same links" in lines[0]


def test_sub_node_pods_on_a_fragmented_cluster_do_not_tie(tmp_path):
    from scheduler.cli.demo_cmd import DEMO_NODES, DEMO_USED_FRACTION, spanning_cluster
    from topology.generator import generate_nodelist

    seed, _ = spanning_cluster(0, 8)
    cluster = write_objects(tmp_path, generate_nodelist("hgx-h100", DEMO_NODES, seed, DEMO_USED_FRACTION))
    out = _place(tmp_path, cluster, _job(tmp_path, 8, 1, "tp=2,pp=2,dp=2"))
    assert "every policy ties" not in out


@pytest.mark.parametrize("pods", [1])
def test_one_pod_ties_because_it_stays_in_one_host(tmp_path, pods):
    cluster = write_objects(tmp_path, make_nodelist("hgx-h100", nodes=4))
    out = _place(tmp_path, cluster, _job(tmp_path, pods, 8, "tp=8"))
    assert "every policy ties" in out and "one pod" in out
