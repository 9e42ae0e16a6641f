"""Failure recovery: ETTR / goodput bounds, MTBF monotonicity, and the three policies on controlled failures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import FailureModel, Recovery, SimConfig
from simulations.failure_study import big_job_workload, run_one
from simulations.jobstate import DONE
from simulations.simulator import Simulator
from simulations.workload import SimJob, Workload, infer_parallelism

H = 3600.0
SPEC = ClusterSpec("hgx-h100", 136)
SPARES = 0.03  # one spare per 32-node leaf (5 on 136 nodes: 131 usable, the 1,024-GPU job takes 128)
POLICIES = (Recovery.meshfit, Recovery.replace_one, Recovery.restart)


def _model(recovery: Recovery, **extra) -> FailureModel:
    spares = SPARES if recovery == Recovery.meshfit else 0.0
    return FailureModel(extra.pop("mtbf", 0.0), 4.0, 30.0, 10.0, recovery, spares, 3.0, **extra)


def _workload(fillers: int) -> Workload:
    big = SimJob("big", 0.0, 10 * H, 1024, infer_parallelism(1024))
    return Workload([big] + [SimJob(f"f{i}", 0.0, 40 * H, 8, infer_parallelism(8)) for i in range(fillers)], "test")


def _run(workload: Workload, failures: FailureModel) -> Simulator:
    sim = Simulator(build_cluster(SPEC), workload, "meshfit", replace(SimConfig(), failures=failures, samples=10))
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def _big_nodes(workload: Workload, recovery: Recovery) -> list[int]:
    """The nodes the big job gets without failures (placement is deterministic)."""
    return sorted(_run(workload, _model(recovery)).jobs[0].usage)


def _scripted(workload: Workload, recovery: Recovery, picks: tuple[int, ...], at: float = 2.25 * H) -> Simulator:
    nodes = _big_nodes(workload, recovery)
    return _run(workload, _model(recovery, scripted=tuple((at, nodes[p], 4 * H) for p in picks)))


def _ettr(sim: Simulator) -> float:
    big = sim.jobs[0]
    assert big.state == DONE
    return big.productive / (big.end - big.job.submit)


def _goodput(sim: Simulator) -> float:
    big = sim.jobs[0]
    return big.gpus * big.productive / big.held


@pytest.mark.parametrize("recovery", POLICIES)
def test_ettr_is_one_without_failures(recovery):
    sim = _run(_workload(0), _model(recovery))
    assert _ettr(sim) == pytest.approx(1.0) and _goodput(sim) == pytest.approx(1.0)
    assert sim.result.details["ettr_submit"] == pytest.approx(1.0)
    assert sim.result.details["goodput"] == pytest.approx(1.0)


@pytest.mark.parametrize("recovery", POLICIES)
def test_ettr_in_unit_interval_and_falls_with_shorter_mtbf(recovery):
    means = []
    for mtbf in (5000.0, 1500.0, 300.0):
        rows = [run_one(SPEC, big_job_workload(2.0, 64, seed, 0.9), "meshfit", _model(recovery, mtbf=mtbf), seed, "big")
                for seed in range(3)]
        for row in rows:
            assert 0.0 < row["ettr"] <= 1.0 and 0.0 < row["goodput"] <= 1.0
            assert row["ettr"] <= row["ettr_start"] + 1e-12
        means.append(sum(row["ettr"] for row in rows) / len(rows))
    assert means[0] > means[1] > means[2]


def test_single_failure_on_a_full_cluster_orders_the_policies():
    """No free node: meshfit takes a spare; the others wait for the repair (restart also gives its nodes up)."""
    workload = _workload(fillers=8)
    runs = {r: _scripted(workload, r, (5,)) for r in POLICIES}
    ettr = {r: _ettr(sim) for r, sim in runs.items()}
    goodput = {r: _goodput(sim) for r, sim in runs.items()}
    assert ettr[Recovery.meshfit] > ettr[Recovery.replace_one] >= ettr[Recovery.restart]
    assert goodput[Recovery.meshfit] > goodput[Recovery.replace_one]
    assert goodput[Recovery.replace_one] < goodput[Recovery.restart]  # replace-one holds 127 idle nodes
    assert runs[Recovery.meshfit].result.details["spares_used"] == 1
    # meshfit: lost 15 min since the 2:00 checkpoint, resumed 3 min (pod bring-up) after the failure, 10 min restart
    big = runs[Recovery.meshfit].jobs[0]
    assert big.lost == pytest.approx(0.25 * H) and big.overhead == pytest.approx(10 * 60)
    assert big.start == pytest.approx(2.25 * H + 3 * 60)
    # the others wait for the 4 h repair first
    for slow in (Recovery.restart, Recovery.replace_one):  # failure + repair + the 8 h not checkpointed
        assert runs[slow].jobs[0].end >= (2.25 + 4 + 8) * H


def test_several_failures_at_once_replace_one_pays_per_node():
    """Free nodes everywhere: three failed nodes cost replace-one three bring-ups, meshfit and restart one."""
    workload = _workload(fillers=0)
    runs = {r: _scripted(workload, r, (3, 40, 90)) for r in POLICIES}
    resumed = {r: sim.jobs[0].start + sim.jobs[0].overhead for r, sim in runs.items()}  # training runs again
    assert resumed[Recovery.meshfit] == pytest.approx(2.25 * H + 3 * 60 + 10 * 60)
    assert resumed[Recovery.replace_one] - resumed[Recovery.meshfit] == pytest.approx(2 * 3 * 60)
    assert resumed[Recovery.restart] == pytest.approx(resumed[Recovery.meshfit])
    assert _ettr(runs[Recovery.replace_one]) < _ettr(runs[Recovery.meshfit])
    assert runs[Recovery.replace_one].result.details["replacements"] == 3
    for sim in runs.values():
        assert sim.jobs[0].restarts == 1 and 0.0 < _ettr(sim) < 1.0


def test_spares_are_kept_from_ordinary_gangs_and_refilled_after_repair():
    workload = _workload(fillers=8)
    sim = _scripted(workload, Recovery.meshfit, (5,))
    assert sim.result.details["spare_nodes"] == 5
    started = [rj for rj in sim.jobs[1:] if rj.first_start == 0.0]
    assert len(started) == 131 - 128  # five fillers had to wait: the spares are not theirs
    assert len(sim.recovery.spares) == 5  # the repaired node refilled its leaf's pool


def test_a_job_larger_than_the_non_spare_capacity_is_rejected_not_left_queued():
    workload = Workload([SimJob("huge", 0.0, H, 136 * 8, infer_parallelism(136 * 8))], "test")
    sim = _run(workload, _model(Recovery.meshfit))
    assert sim.jobs[0].state != DONE and "spare GPUs" in (sim.jobs[0].reason or "")
    assert _run(workload, _model(Recovery.restart)).jobs[0].state == DONE
