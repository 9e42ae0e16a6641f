"""`meshfit demo` end to end with a couple of steps (issue 26 item 3): a cluster where the job must span hosts,
meshfit ahead of both baselines on predicted step communication, a picture that opens, a line before the workers
start, and the node of every rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]


def _demo(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MESHFIT, "demo", "--steps", "2", *args], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)


def test_demo_shows_meshfit_ahead_on_a_job_that_must_span_hosts_and_draws_it(tmp_path):
    from matplotlib.image import imread

    from scheduler.cli.demo_cmd import DEMO_NODES, DEMO_PRESET, DEMO_USED_FRACTION
    from topology.generator import generate_cluster

    result = _demo(tmp_path, "--picture", "pictures/layouts.png", "-o", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    cluster = summary["cluster"]
    topo = generate_cluster(DEMO_PRESET, DEMO_NODES, cluster["seed"], DEMO_USED_FRACTION)
    assert max(node.gpus_free for node in topo.nodes) < 8 <= topo.gpus_free, "the job must span hosts"
    assert f"--seed {cluster['seed']}" in cluster["generate"] and "--used-fraction 0.8" in cluster["generate"]
    placements = summary["placements"]
    assert {p["status"] for p in placements.values()} == {"placed"}
    comm = {name: p["cost"]["step_comm_seconds"] for name, p in placements.items()}
    assert comm["meshfit"] < comm["kueue-tas"] and comm["meshfit"] < comm["volcano-hypernode"], comm
    assert len({pod["node"] for pod in placements["meshfit"]["pods"]}) > 1

    picture = tmp_path / "pictures" / "layouts.png"
    assert summary["picture"] == str(picture.resolve())
    pixels = imread(picture)
    height, width = pixels.shape[:2]
    assert width >= 800 and height >= 500, pixels.shape
    assert pixels[..., :3].std() > 0.05, "the picture is not blank"

    run = summary["run"]
    assert run["status"] == "completed" and run["steps"] == 2 and len(run["losses"]) == 2
    pod_node = {pod["index"]: pod["node"] for pod in placements["meshfit"]["pods"]}
    assert [(r["rank"], r["node"]) for r in run["ranks"]] == [(r["rank"], pod_node[r["pod_index"]]) for r in run["ranks"]]
    assert sorted(r["pod_index"] for r in run["ranks"]) == list(range(8)), "one-GPU pods: one rank each"
    assert "starting 8 worker processes" in result.stderr


def test_demo_table_names_the_picture_and_each_ranks_node_and_speaks_before_the_workers(tmp_path):
    result = _demo(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    picture = tmp_path / "meshfit-demo.png"
    assert picture.is_file() and f"picture: {picture.resolve()}" in out
    assert "vs meshfit" in out and "predicted communication per training step" in out
    starting = result.stderr.index("starting 8 worker processes")
    assert "training" not in result.stderr[:starting], "the line comes before the progress bar"
    ranks_table = out[out.index("ranks as the worker processes saw them"):]
    rank_rows = [line.split("│")[1:4] for line in ranks_table.splitlines() if line.startswith("│ ")]
    assert len(rank_rows) == 8 and all(node.strip().startswith("dgx-h100-") for _, _, node in rank_rows), ranks_table
