"""Simulator invariants: determinism, conservation, every job accounted for, failures, runtime model."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulations.cluster import ClusterSpec, build_cluster, free_pod_slots
from simulations.config import RuntimeModel
from simulations.jobstate import DONE
from simulations.report import write_outputs
from simulations.synthetic import generate
from simulations.workload import Workload
from tests.simulations.sim_builders import make_config, make_jobs, make_workload, simulate

POLICIES = ["first-fit", "meshfit", "kueue-tas", "volcano-hypernode"]


def summary_without_wall(tmp_path, result, name):
    write_outputs(tmp_path / name, [result], 0.0, {}, plots=False)
    document = json.loads((tmp_path / name / "summary.json").read_text())
    document.pop("wall_seconds")
    return json.dumps(document, sort_keys=True)


@pytest.mark.parametrize("policy", POLICIES, ids=POLICIES)
def test_same_inputs_and_seed_give_identical_summaries(tmp_path, policy):
    workload = generate(150, 256, seed=3)
    config = make_config(mtbf_hours=20.0, seed=3)
    first = simulate(workload, policy, nodes=32, config=config)[1]
    second = simulate(workload, policy, nodes=32, config=config)[1]
    assert summary_without_wall(tmp_path, first, "a") == summary_without_wall(tmp_path, second, "b")
    assert first.jobs == second.jobs and first.samples == second.samples


@pytest.mark.parametrize("policy", POLICIES, ids=POLICIES)
def test_gpu_seconds_never_exceed_capacity_and_every_job_is_accounted(policy):
    sim, result = simulate(generate(200, 128, seed=5, load=1.5), policy, nodes=16, config=make_config(mtbf_hours=10.0))
    info = result.details
    assert info["busy_gpu_hours"] <= info["capacity_gpu_hours"] + 1e-6
    assert all(row[1] <= result.total_gpus for row in result.samples)
    assert 0.0 <= result.summary["utilization"] <= 1.0
    assert all(rj.state == DONE or rj.reason for rj in sim.jobs)
    assert result.summary["completed"] + sum(info["not_completed"].values()) == result.summary["jobs"]
    assert sim.busy == 0 and sim.topo.gpus_free == sim.topo.gpus_total
    sim.topo.check_invariants()


def test_held_gpu_time_matches_the_busy_integral():
    sim, result = simulate(make_workload(), "first-fit", nodes=4)
    held = sum(rj.gpus * rj.run_seconds for rj in sim.jobs)
    assert held / 3600.0 == pytest.approx(result.details["busy_gpu_hours"])


def test_jobs_larger_than_the_cluster_are_reported_not_completed():
    workload = Workload(make_jobs([(0, 100, 8), (1, 100, 64), (2, 100, 4)]), "test")
    sim, result = simulate(workload, "first-fit", nodes=2)
    assert result.summary["completed"] == 2
    assert sim.jobs[1].reason == "needs 64 GPUs; the cluster has 16"


def test_failures_restart_jobs_and_lower_ettr():
    workload = Workload(make_jobs([(0, 20 * 3600, 32)] * 4), "test")
    sim, result = simulate(workload, "first-fit", nodes=16, config=make_config(mtbf_hours=50.0, seed=1))
    assert result.details["node_failures"] > 0 and result.details["restarts"] > 0
    assert result.summary["completed"] == 4
    assert 0.0 < result.summary["ettr"] < 1.0
    assert all(rj.productive == pytest.approx(rj.job.duration * rj.mean_slowdown, rel=0.05) or rj.restarts
               for rj in sim.jobs)


def test_failure_schedule_is_shared_by_policies():
    workload = generate(100, 128, seed=2)
    counts = {simulate(workload, p, nodes=16, config=make_config(mtbf_hours=5.0))[1].details["node_failures"]
              for p in ("first-fit", "volcano-hypernode")}
    assert len(counts) == 1 and counts.pop() > 0


@given(comm=st.floats(0.0, 100.0), ideal=st.floats(1e-6, 10.0), fraction=st.floats(0.01, 0.99),
       overlap=st.floats(0.0, 0.99))
def test_slowdown_is_at_least_one_and_grows_with_communication(comm, ideal, fraction, overlap):
    model = RuntimeModel(fraction, overlap)
    low = model.slowdown(comm, ideal)
    assert low >= 1.0
    assert model.slowdown(comm * 2 + ideal, ideal) >= low
    assert model.slowdown(ideal, ideal) == pytest.approx(1.0)


def test_slowdown_example_matches_the_documented_formula():
    # f = 0.2, overlap 0.5: compute = 4 c*, slowdown = (4 + 0.5 * 3) / (4 + 0.5) for c = 3 c*.
    assert RuntimeModel(0.2, 0.5).slowdown(3.0, 1.0) == pytest.approx(5.5 / 4.5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 8), st.booleans()), max_size=30))
def test_fast_topology_reads_exactly_what_the_base_topology_reads(ops):
    spec = ClusterSpec("hgx-h100", 8)
    fast, base = build_cluster(spec), build_cluster(spec, fast=False)
    for step, (node, gpus, up) in enumerate(ops):
        for topo in (fast, base):
            name = topo.nodes[node].name
            if gpus and topo.nodes[node].gpus_free >= gpus:
                topo.add_pod(f"p{step}", name, gpus)
            topo.set_schedulable(name, up)
    assert [n.gpus_free for n in fast.nodes] == [n.gpus_free for n in base.nodes]
    assert fast.gpus_free == base.gpus_free
    for pod_gpus in (1, 2, 3, 4, 8):
        assert free_pod_slots(fast, pod_gpus) == free_pod_slots(base, pod_gpus)
    fast.check_invariants()


def test_outputs_include_series_jobs_and_plots(tmp_path):
    result = simulate(make_workload(), "first-fit", nodes=4)[1]
    document = write_outputs(tmp_path, [result], 1.5, {"cluster": "x"})
    assert set(document) == {"policies", "wall_seconds", "events"}
    assert list(document["policies"]["first-fit"]) == ["jobs", "completed", "jct_mean", "jct_p50", "jct_p99",
                                                       "queue_mean", "utilization", "fragmentation_mean",
                                                       "comm_slowdown_mean", "ettr", "gpu_allocation",
                                                       "useful_work", "jct_slowdown_mean"]
    for name in ("timeseries-first-fit.csv", "jobs-first-fit.csv", "jct_cdf.png", "gpu_allocation.png",
                 "useful_work.png",
                 "queue_length.png", "details.json", "runs.csv"):
        assert (tmp_path / name).stat().st_size > 0
