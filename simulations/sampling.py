"""Time-series sampling of a running simulation at a fixed interval (see `metrics.SAMPLE_COLUMNS`)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from simulations.cluster import node_state, nvlink_level
from simulations.workload import Workload
from topology.model import ClusterTopology

Simulator = Any
"""The `simulations.simulator.Simulator` driving this (not imported: the simulator imports this module)."""


def sample_interval(workload: Workload, samples: int) -> float:
    """Seconds between samples: the arrival span (or a few typical runtimes) over `samples`."""
    jobs = workload.jobs
    if not jobs:
        return 60.0
    span = jobs[-1].submit - jobs[0].submit
    if span <= 0:
        span = 4.0 * statistics.fmean(j.duration for j in jobs)
    return max(span / max(samples, 1), 1.0)


class Sampler:
    """Takes a sample every `interval` simulated seconds; tracks waiting pod sizes for fragmentation."""

    def __init__(self, topo: ClusterTopology, workload: Workload, samples: int) -> None:
        self.topo = topo
        self.interval = sample_interval(workload, samples)
        self.target = max(samples, 2)
        self.next_time = workload.jobs[0].submit if workload.jobs else 0.0
        self.level = nvlink_level(topo)
        self.level_domains = np.array([node.path[self.level] for node in topo.nodes], dtype=np.int64)
        """Each node's domain at the NVLink level."""
        self.waiting_pod_sizes: dict[int, int] = {}
        self.rows: list[tuple] = []

    def queued(self, pod_gpus: int, delta: int) -> None:
        """A job whose pods have `pod_gpus` GPUs joined (+1) or left (-1) the queue."""
        count = self.waiting_pod_sizes.get(pod_gpus, 0) + delta
        if count:
            self.waiting_pod_sizes[pod_gpus] = count
        else:
            self.waiting_pod_sizes.pop(pod_gpus, None)

    def until(self, when: float, sim: Simulator) -> None:
        """Record every sample due before `when` (the state is constant until then)."""
        if self.next_time >= when:
            return
        row = self._row(sim)
        while self.next_time < when:
            self.rows.append((round(self.next_time, 3), *row))
            self.next_time += self.interval
            if len(self.rows) >= 2 * self.target:
                self._thin()

    def _thin(self) -> None:
        """Keep every other sample and double the interval (bounds the series on long drains)."""
        self.rows = self.rows[::2]
        self.interval *= 2.0
        self.next_time = self.rows[-1][0] + self.interval

    def _row(self, sim: Simulator) -> tuple:
        topo, total = self.topo, sim.total_gpus
        smallest = min(self.waiting_pod_sizes) if self.waiting_pod_sizes else 0
        node_free, domain_free = topo.free_arrays()
        used, up = node_state(topo)
        free = int(node_free.sum())  # 0 on unschedulable nodes
        stranded = int(node_free[node_free < smallest].sum())
        touched = np.unique(self.level_domains[up & (used != 0)])
        broken = int(np.count_nonzero(domain_free[touched] > 0))
        down = int(up.size - np.count_nonzero(up))
        return (sim.busy, round(sim.busy / total, 6), len(sim.queue), len(sim.running_by_end), free, stranded,
                round(stranded / total, 6), broken, down, round(max(sim.ideal_busy, 0.0) / total, 6))
