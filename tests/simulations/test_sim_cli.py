"""`meshfit simulate` / `meshfit plan` exit codes and outputs, and local / Dask sweeps."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from simulations.cluster import ClusterSpec
from simulations.runner import run_many, sweep_specs
from simulations.traces import DATA_DIR
from tests.simulations.sim_builders import make_config, make_workload

runner = CliRunner()
TRACE = str(DATA_DIR / "philly-gavel" / "23dbec.trace")


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_simulate_writes_the_design_summary(tmp_path):
    result = invoke("simulate", "--preset", "hgx-h100", "--nodes", "4", "--trace", TRACE, "--policy", "first-fit",
                    "--policy", "kueue-tas", "--out-dir", str(tmp_path / "out"), "-o", "json", "--no-plots")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert printed == written
    assert list(written["policies"]) == ["first-fit", "kueue-tas"]
    assert written["policies"]["first-fit"]["jobs"] == 9 and written["events"] > 0


def test_simulate_synthetic_table_output(tmp_path):
    result = invoke("simulate", "--preset", "gb200-nvl72", "--nodes", "36", "--synthetic", "40", "--policy",
                    "first-fit", "--seed", "1", "--seed", "2", "--out-dir", str(tmp_path / "syn"), "--no-plots")
    assert result.exit_code == 0, result.output
    assert "events/s" in result.stdout
    assert (tmp_path / "syn" / "timeseries-first-fit-seed2.csv").exists()


@pytest.mark.parametrize("args,message", [
    (["--trace", "missing.csv"], "does not exist"),
    (["--trace", "BAD"], "missing column"),
    (["--trace", TRACE, "--policy", "nope"], "unknown policy 'nope'"),
    (["--synthetic", "5", "--trace", TRACE], "exactly one of --trace"),
    (["--trace", TRACE, "--link", "spine=4"], "LEVEL.FIELD=VALUE"),
    (["--trace", TRACE, "--comm-fraction", "1.5"], "comm fraction"),
    (["--trace", TRACE, "--max-tp", "0"], "--max-tp must be at least 1"),
    (["--trace", TRACE, "--max-comm-ratio", "0.5"], "--max-comm-ratio must be a finite number >= 1"),
], ids=["missing-trace", "bad-trace", "unknown-policy", "two-workloads", "bad-link", "bad-runtime", "bad-max-tp",
        "bad-comm-limit"])
def test_simulate_bad_input_exits_2_with_one_line(tmp_path, args, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,when\n1,2\n")
    args = [str(bad) if a == "BAD" else a for a in args]
    result = invoke("simulate", "--preset", "hgx-h100", "--nodes", "2", "--out-dir", str(tmp_path / "o"), *args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def write_candidate(tmp_path, name: str, body: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(body)
    return str(path)


def test_plan_ranks_candidates_by_cost(tmp_path):
    oversubscribed = write_candidate(tmp_path, "hgx-4to1", "preset: hgx-h100\nnodes: 8\nlinks:\n"
                                     "  spine: {oversubscription: 4}\nprice_per_gpu_hour: 2.0\n")
    gb200 = write_candidate(tmp_path, "gb200", "preset: gb200-nvl72\nnodes: 16\nprice_per_gpu_hour: 3.0\n")
    result = invoke("plan", "--candidate", oversubscribed, "--candidate", gb200, "--synthetic", "30",
                    "--policy", "first-fit", "--out-dir", str(tmp_path / "plan"), "-o", "json", "--workers", "1")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ranked_by"] == "cost_to_train"
    assert [row["rank"] for row in document["candidates"]] == [1, 2]
    costs = [row["cost_to_train"] for row in document["candidates"]]
    assert costs == sorted(costs)
    rows = {row["candidate"]: row for row in document["candidates"]}
    assert rows["hgx-4to1"]["gpu"] == "h100-sxm" and rows["gb200"]["gpu"] == "gb200"
    for row in rows.values():
        assert row["cost_to_train"] == pytest.approx(row["price_per_gpu_hour"] * row["gpus"]
                                                     * row["time_to_train_hours"], rel=1e-3)
    assert (tmp_path / "plan" / "plan.png").exists()


@pytest.mark.parametrize("body,message", [("preset: hgx-h100\n", "nodes must be at least 1"),
                                          ("preset: nope\nnodes: 2\n", "unknown preset"),
                                          ("nodes: [\n", "not valid YAML"),
                                          ("preset: hgx-h100\nnodes: 2\nlinks: {spine: {speed: 1}}\n", "speed"),
                                          ("preset: hgx-h100\nnodes: 2\ngpu: {generation: gb20}\n",
                                           "did you mean 'gb200'"),
                                          ("preset: hgx-h100\nnodes: 2\ngpu: {dense_tflops: 9}\n",
                                           "did you mean 'dense_bf16_tflops'")],
                         ids=["no-nodes", "bad-preset", "bad-yaml", "bad-link", "bad-gpu", "gpu-key-typo"])
def test_plan_bad_candidate_exits_2(tmp_path, body, message):
    result = invoke("plan", "--candidate", write_candidate(tmp_path, "c", body), "--synthetic", "5")
    assert result.exit_code == 2
    assert message in result.stderr


def test_process_pool_sweep_matches_sequential_runs():
    specs = sweep_specs([ClusterSpec("hgx-h100", 4)], ["first-fit", "volcano-hypernode"], [0, 1], make_config())
    workload = make_workload()
    pooled = run_many(specs, workload, workers=2)
    sequential = run_many(specs, workload, workers=1)
    assert [r.summary for r in pooled] == [r.summary for r in sequential]
    assert [(r.policy, r.seed) for r in pooled] == [("first-fit", 0), ("first-fit", 1),
                                                   ("volcano-hypernode", 0), ("volcano-hypernode", 1)]


def test_dask_sweep_matches_local_runs():
    distributed = pytest.importorskip("dask.distributed")
    specs = sweep_specs([ClusterSpec("hgx-h100", 4)], ["first-fit"], [0, 1], make_config())
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        remote = run_many(specs, make_workload(), dask_address=cluster.scheduler_address)
    assert [r.summary for r in remote] == [r.summary for r in run_many(specs, make_workload(), workers=1)]


def test_dask_unreachable_is_a_clean_error(tmp_path):
    pytest.importorskip("dask.distributed")
    result = invoke("simulate", "--preset", "hgx-h100", "--nodes", "2", "--trace", TRACE, "--out-dir", str(tmp_path / "d"),
                    "--dask", "tcp://127.0.0.1:9", "--no-plots")
    assert result.exit_code == 2
    assert "Dask scheduler" in result.stderr


def test_simulate_records_the_comm_limit_and_waits_for_aligned_layouts(tmp_path):
    args = ("simulate", "--preset", "gb200-nvl72", "--nodes", "36", "--synthetic", "60", "--policy", "first-fit",
            "--max-tp", "16", "-o", "json", "--no-plots")
    loose = invoke(*args, "--out-dir", str(tmp_path / "loose"))
    strict = invoke(*args, "--max-comm-ratio", "1.5", "--out-dir", str(tmp_path / "strict"))
    assert loose.exit_code == 0 and strict.exit_code == 0, strict.output
    details = json.loads((tmp_path / "strict" / "details.json").read_text())
    assert details["config"]["max_comm_ratio"] == 1.5
    worst = {name: max(float(row["comm_ratio"]) for row in csv.DictReader((tmp_path / name / "jobs-first-fit.csv").open())
                       if row["status"] == "done") for name in ("loose", "strict")}
    assert worst["loose"] > 1.5 >= worst["strict"]
