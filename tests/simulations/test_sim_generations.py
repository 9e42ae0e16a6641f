"""The simulator on different GPU generations: trace jobs scaled by the peak ratio, model jobs timed from FLOPs."""

from __future__ import annotations

import pytest

from scheduler.placement.cost import lower_bound_seconds
from scheduler.placement.jobs import ModelShape, Parallelism
from scheduler.placement.steptime import StepTimeModel
from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import RuntimeModel
from simulations.simulator import Simulator
from simulations.workload import SimJob, Workload, make_gang
from tests.simulations.sim_builders import make_config
from topology.hardware import GENERATIONS


def _run(preset: str, nodes: int, jobs: list[SimJob], **config):
    topo = build_cluster(ClusterSpec(preset, nodes))
    sim = Simulator(topo, Workload(jobs, "test"), "meshfit", make_config(**config))
    return sim, sim.run()


def _single(duration: float = 3600.0, gpus: int = 8) -> list[SimJob]:
    return [SimJob("j0", 0.0, duration, gpus)]


def test_trace_gpu_cluster_keeps_the_trace_duration():
    sim, result = _run("hgx-h100", 2, _single())
    assert sim.hardware.name == "h100-sxm"
    assert sim.jobs[0].ideal == 3600.0 and sim.jobs[0].end == pytest.approx(3600.0)


@pytest.mark.parametrize("preset,nodes,generation", [("hgx-b200", 2, "b200"), ("gb200-nvl72", 4, "gb200")],
                         ids=["b200", "gb200"])
def test_faster_generation_shortens_trace_jobs_by_the_peak_ratio(preset, nodes, generation):
    sim, _ = _run(preset, nodes, _single())
    ratio = GENERATIONS["h100-sxm"].dense_bf16_tflops / GENERATIONS[generation].dense_bf16_tflops
    f, o = 0.2, 0.5
    expected = 3600.0 * ((1 - f) / f * ratio + (1 - o)) / ((1 - f) / f + (1 - o))
    assert sim.hardware.name == generation
    assert sim.jobs[0].ideal == pytest.approx(expected)
    assert sim.jobs[0].end == pytest.approx(expected * sim.jobs[0].slowdown)


def test_trace_recorded_on_gb200_runs_slower_on_h100():
    from dataclasses import replace

    config = make_config()
    config = replace(config, runtime=RuntimeModel(trace_gpu="gb200"))
    topo = build_cluster(ClusterSpec("hgx-h100", 2))
    sim = Simulator(topo, Workload(_single(), "t"), "meshfit", config)
    assert sim.jobs[0].ideal > 3600.0


def test_model_job_is_timed_from_flops_and_communication():
    model = ModelShape(params=8e9, layers=32, hidden=4096, seq=4096, global_batch=64)
    job = SimJob("m0", 0.0, 0.0, 16, Parallelism(tp=8, dp=2), model, steps=100)
    sim, result = _run("hgx-h100", 2, [job])
    gang = make_gang(job, 8)
    compute = StepTimeModel().compute_seconds(model, gang.parallelism, GENERATIONS["h100-sxm"])
    ideal = 100 * (compute + 0.5 * lower_bound_seconds(gang, sim.topo))
    assert sim.jobs[0].ideal == pytest.approx(ideal)
    assert result.summary["completed"] == 1
    faster, _ = _run("hgx-b200", 2, [SimJob("m0", 0.0, 0.0, 16, Parallelism(tp=8, dp=2), model, steps=100)])
    assert faster.jobs[0].ideal < sim.jobs[0].ideal / 2


def test_mfu_must_be_a_share():
    with pytest.raises(ValueError, match="mfu"):
        RuntimeModel(mfu=1.5)


def test_candidate_gpu_block_sets_generation_figures_and_link_bandwidths(tmp_path):
    from simulations.planner import load_candidate

    path = tmp_path / "c.yaml"
    path.write_text("preset: hgx-h100\nnodes: 2\nlinks: {spine: {bandwidth_gbps: 25}}\n"
                    "gpu: {generation: b200, network_gbps: 100, mfu: 0.3}\n")
    _, spec = load_candidate(path)
    assert spec.gpu == "b200" and spec.mfu == 0.3 and dict(spec.gpu_figures) == {"network_gbps": 100}
    assert spec.links["host"]["bandwidth_gbps"] == 900 and spec.links["nvlink"]["bandwidth_gbps"] == 900
    assert spec.links["leaf"]["bandwidth_gbps"] == 100
    assert spec.links["spine"]["bandwidth_gbps"] == 25  # the candidate's own link override wins
    topo = build_cluster(spec)
    assert spec.hardware(topo).name == "b200" and spec.hardware(topo).network_gbps == 100
