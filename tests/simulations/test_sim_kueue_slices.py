"""Simulator side of Kueue slices: which gangs get slice annotations, at which level, and for which policy."""

from __future__ import annotations

from dataclasses import replace

from scheduler.placement.capacity import slices_satisfied
from scheduler.placement.jobs import Parallelism
from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import KueueSlices
from simulations.simulator import Simulator
from simulations.workload import KueueSliceRule, SimJob, Workload, kueue_slice_rule, make_gang, tp_pods
from tests.simulations.sim_builders import make_config


def job(gpus: int, tp: int, pp: int = 1, name: str = "j") -> SimJob:
    return SimJob(name, 0.0, 600.0, gpus, Parallelism(tp=tp, pp=pp, dp=gpus // (tp * pp)))


def test_tp_pods_counts_pods_of_one_tensor_group():
    assert tp_pods(make_gang(job(64, 8), 4)) == 2      # GB200 trays: tp=8 spans two 4-GPU pods
    assert tp_pods(make_gang(job(64, 16), 4)) == 4
    assert tp_pods(make_gang(job(64, 8), 8)) == 1      # HGX: a tp group sits inside one pod
    assert tp_pods(make_gang(job(48, 6), 4)) == 1      # pods do not hold whole tp groups
    gang = make_gang(job(64, 8, pp=2), 4)
    assert tp_pods(replace(gang, rank_order="pp-dp-tp")) == 1  # tp not innermost: slices would not be tp groups


def test_gb200_slices_sit_in_the_nvlink_domain():
    topo = build_cluster(ClusterSpec("gb200-nvl72", 36))
    rule = KueueSliceRule(topo)
    gang = make_gang(job(64, 8), 4, rule)
    level = topo.levels[next(i for i, lvl in enumerate(topo.levels) if lvl.name == gang.constraint.slice_required_level)]
    assert gang.constraint.slice_size == 2
    assert gang.constraint.preferred_level == level.name
    assert level.name != topo.levels[topo.host_level].name   # above the tray, inside one NVL72 rack domain
    assert make_gang(job(8, 4), 4, rule).constraint.has_slices is False  # one pod per tp group: nothing to slice


def test_which_runs_get_a_slice_rule():
    topo = build_cluster(ClusterSpec("gb200-nvl72", 18))
    assert isinstance(kueue_slice_rule(topo, "kueue-tas", KueueSlices.auto), KueueSliceRule)
    assert kueue_slice_rule(topo, "kueue-tas", "off") is None
    assert kueue_slice_rule(topo, "meshfit", KueueSlices.auto) is None
    assert isinstance(kueue_slice_rule(topo, "meshfit", "all"), KueueSliceRule)
    assert isinstance(kueue_slice_rule(topo, "first-fit", KueueSlices.all), KueueSliceRule)


def test_kueue_tas_run_keeps_every_slice_and_off_does_not_annotate():
    jobs = [SimJob(f"j{i}", float(i), 900.0, 32, Parallelism(tp=8, dp=4)) for i in range(12)]
    sim = Simulator(build_cluster(ClusterSpec("gb200-nvl72", 36)), Workload(jobs, "test"), "kueue-tas", make_config())
    started = []
    start = sim._start

    def recording(rj, placement, *rest):
        started.append((rj.gang, placement.pod_nodes))
        start(rj, placement, *rest)

    sim._start = recording
    result = sim.run()
    assert result.summary["completed"] == len(jobs)
    assert {gang.key for gang, _ in started} == {run.gang.key for run in sim.jobs}
    for gang, pod_nodes in started:
        assert gang.constraint.slice_size == 2
        assert slices_satisfied(gang, sim.topo, pod_nodes)
    off = Simulator(build_cluster(ClusterSpec("gb200-nvl72", 36)), Workload(jobs, "test"), "kueue-tas",
                    make_config(kueue_slices=KueueSlices.off))
    assert not any(run.gang.constraint.has_slices for run in off.jobs)
