"""Builders with defaults for simulator tests: small clusters, hand-made workloads, one-call runs."""

from __future__ import annotations

from dataclasses import replace

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import Backfill, FailureModel, SimConfig
from simulations.metrics import RunResult
from simulations.simulator import Simulator
from simulations.workload import SimJob, Workload


def make_jobs(rows: list[tuple[float, float, int]], prefix: str = "j") -> list[SimJob]:
    """Jobs from (submit, duration, gpus) rows."""
    return [SimJob(f"{prefix}{i:03d}", submit, duration, gpus) for i, (submit, duration, gpus) in enumerate(rows)]


def make_workload(rows: list[tuple[float, float, int]] | None = None) -> Workload:
    """A small mixed workload (defaults: 12 jobs of 1-32 GPUs arriving close together)."""
    rows = rows or [(0, 3600, 8), (10, 600, 32), (20, 1200, 4), (30, 300, 1), (40, 7200, 16), (50, 900, 8),
                    (60, 1800, 2), (70, 2400, 32), (80, 60, 1), (90, 5000, 8), (100, 450, 4), (110, 3000, 16)]
    return Workload(make_jobs(rows), "test")


def make_config(backfill: Backfill = Backfill.easy, mtbf_hours: float = 0.0, seed: int = 0, **extra) -> SimConfig:
    """A config with the given backfill and failure rate (samples kept small)."""
    failures = FailureModel(node_mtbf_hours=mtbf_hours, repair_hours=1.0, checkpoint_minutes=10.0, restart_minutes=2.0)
    return replace(SimConfig(), backfill=backfill, failures=failures, seed=seed, samples=50, **extra)


def simulate(workload: Workload | None = None, policy: str = "first-fit", nodes: int = 4,
             preset: str = "hgx-h100", config: SimConfig | None = None) -> tuple[Simulator, RunResult]:
    """Run one simulation on a small preset cluster; returns the simulator (for its state) and result."""
    topo = build_cluster(ClusterSpec(preset, nodes))
    sim = Simulator(topo, workload or make_workload(), policy, config or make_config())
    return sim, sim.run()
