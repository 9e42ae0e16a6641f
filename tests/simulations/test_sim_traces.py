"""Trace loaders (bundled Gavel traces, generic CSV) and the calibrated synthetic generator."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from simulations.session import load_workload
from simulations.synthetic import KALOS, generate, load_cluster_stats, size_classes
from simulations.traces import DATA_DIR, TraceError, load_csv, load_trace, philly_runtime_at, write_csv
from simulations.workload import SimJob, infer_parallelism, make_gang

GAVEL = DATA_DIR / "philly-gavel"
HEADER = "job_id,submit_time,duration_seconds,gpus"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name,jobs,max_gpus", [("2869ce.trace", 533, 32), ("e13805.trace", 607, 24),
                                                ("23dbec.trace", 9, 8)], ids=["2869ce", "e13805", "23dbec"])
def test_gavel_trace_loads_every_job_with_positive_runtime(name, jobs, max_gpus):
    workload = load_trace(GAVEL / name)
    assert len(workload.jobs) == jobs
    assert max(j.gpus for j in workload.jobs) == max_gpus
    assert all(j.duration > 0 and j.parallelism.dp == j.gpus for j in workload.jobs)
    assert "quantile matching" in workload.method


def test_gavel_durations_follow_steps_within_a_job_type():
    rows = [line.split("\t") for line in (GAVEL / "2869ce.trace").read_text().splitlines()]
    workload = load_trace(GAVEL / "2869ce.trace")
    by_id = {j.job_id: j for j in workload.jobs}
    kind = rows[0][0]
    same = sorted((float(r[4]), by_id[f"job-{i:05d}"].duration) for i, r in enumerate(rows) if r[0] == kind)
    assert [d for _, d in same] == sorted(d for _, d in same)


def test_gavel_directory_merges_files_with_distinct_ids():
    workload = load_trace(GAVEL)
    assert len(workload.jobs) == 533 + 607 + 9
    assert len({j.job_id for j in workload.jobs}) == len(workload.jobs)


def test_matched_durations_reproduce_the_philly_median():
    workload = load_trace(GAVEL)
    median = statistics.median(j.duration for j in workload.jobs)
    assert philly_runtime_at(0.4) < median < philly_runtime_at(0.6)


def test_generic_csv_with_optional_columns(tmp_path):
    path = write(tmp_path, f"{HEADER},parallelism,model,priority\n"
                           "a,0,100,16,\"tp=8,dp=2\",\"params=13e9,layers=40\",3\nb,5,50,1,,,\n")
    jobs = load_csv(path).jobs
    assert [j.job_id for j in jobs] == ["a", "b"]
    assert jobs[0].parallelism.tp == 8 and jobs[0].model.params == 13e9 and jobs[0].priority == 3
    assert jobs[1].parallelism is None


@pytest.mark.parametrize("text,message", [
    ("job_id,submit_time,gpus\na,0,1\n", "missing column"),
    (f"{HEADER}\na,zero,10,1\n", "submit_time must be a number"),
    (f"{HEADER}\na,0,10,0\n", "gpus must be a positive integer"),
    (f"{HEADER}\na,0,-5,1\n", "non-negative"),
    (f"{HEADER},parallelism\na,0,10,8,\"tp=4\"\n", "world size 4"),
    (f"{HEADER},parallelism\na,0,10,8,\"xx=8\"\n", "unknown axis"),
    (f"{HEADER}\na,0,10,1\na,1,10,1\n", "duplicate job_id"),
    (f"{HEADER}\n", "no jobs"),
], ids=["missing-column", "bad-number", "zero-gpus", "negative-duration", "world-size", "bad-axis",
        "duplicate", "empty"])
def test_generic_csv_errors_are_one_line_with_location(tmp_path, text, message):
    with pytest.raises(TraceError, match=message) as info:
        load_trace(write(tmp_path, text))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text,message", [("a\tb\tc\n", "expected 7"), ("t\tc\t-n\t1\tmany\t0\t1\n", "total steps")],
                         ids=["columns", "steps"])
def test_gavel_errors_name_the_line(tmp_path, text, message):
    with pytest.raises(TraceError, match=f"bad.trace:1: .*{message}"):
        load_trace(write(tmp_path, text, "bad.trace"))


def test_missing_trace_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope.csv")


def test_synthetic_is_deterministic_and_round_trips_through_csv(tmp_path):
    first, second = generate(300, 4096, seed=7), generate(300, 4096, seed=7)
    assert first.jobs == second.jobs
    write_csv(first, tmp_path / "syn.csv")
    again = load_csv(tmp_path / "syn.csv").jobs
    assert [(j.job_id, j.gpus, str(j.parallelism)) for j in again] == [
        (j.job_id, j.gpus, str(j.parallelism)) for j in first.jobs]


def test_synthetic_matches_kalos_mean_gpus_and_median_runtime():
    jobs = generate(20000, 16384, seed=1).jobs
    assert statistics.fmean(j.gpus for j in jobs) == pytest.approx(KALOS.mean_gpus, rel=0.1)
    assert statistics.median(j.duration for j in jobs) == pytest.approx(KALOS.median_runtime, rel=0.1)
    assert statistics.median(j.gpus for j in jobs) == 1
    assert max(j.gpus for j in jobs) == KALOS.max_gpus


def test_synthetic_respects_a_small_cluster():
    share, large = size_classes(KALOS, cap=512)
    assert 0 < share < 1 and max(g for g, _ in large) == 512
    assert max(j.gpus for j in generate(2000, 512, seed=2).jobs) <= 512


def test_acmetrace_summary_file_gives_other_clusters(tmp_path):
    shared = Path("../shared/data/traces/acmetrace_cluster_summary.csv")
    if not shared.exists():
        pytest.skip("../shared/data/traces is not beside the checkout")
    assert load_cluster_stats("Philly", shared).max_gpus == 128
    assert load_cluster_stats("Kalos", shared).mean_gpus == pytest.approx(26.77)


@pytest.mark.parametrize("gpus,expected", [(1, "tp=1,cp=1,ep=1,pp=1,dp=1"), (8, "tp=8,cp=1,ep=1,pp=1,dp=1"),
                                           (64, "tp=8,cp=1,ep=1,pp=2,dp=4"), (1024, "tp=8,cp=1,ep=1,pp=8,dp=16"),
                                           (12, "tp=6,cp=1,ep=1,pp=1,dp=2")],
                         ids=["1", "8", "64", "1024", "12"])
def test_inferred_parallelism(gpus, expected):
    assert str(infer_parallelism(gpus)) == expected


@pytest.mark.parametrize("gpus,max_tp,tp", [(64, 16, 16), (64, 4, 4), (24, 16, 12), (8, 16, 8), (1, 16, 1)],
                         ids=["tp16", "tp4", "largest-divisor", "small-job", "one-gpu"])
def test_max_tp_caps_the_inferred_tensor_parallel_degree(gpus, max_tp, tp):
    par = infer_parallelism(gpus, max_tp=max_tp)
    assert par.tp == tp and par.world_size == gpus


def test_load_workload_infers_missing_parallelism_with_max_tp(tmp_path):
    trace = write(tmp_path, f"{HEADER}\na,0,60,64\nb,5,60,64\n")
    workload = load_workload(trace, None, 256, 0, 0.9, max_tp=16)
    assert [job.parallelism.tp for job in workload.jobs] == [16, 16]
    synthetic = load_workload(None, 200, 1024, 0, 0.9, max_tp=16)
    assert {job.parallelism.tp for job in synthetic.jobs if job.gpus >= 16} == {16}


@pytest.mark.parametrize("gpus,per_node,pods,pod_gpus", [(64, 8, 8, 8), (64, 4, 16, 4), (12, 8, 2, 6), (7, 4, 7, 1)],
                         ids=["hgx", "gb200", "twelve", "prime"])
def test_gangs_are_sized_to_the_node(gpus, per_node, pods, pod_gpus):
    gang = make_gang(SimJob("x", 0, 1, gpus), per_node)
    gang.validate()
    assert (len(gang.pods), gang.gpus_per_pod) == (pods, pod_gpus)
