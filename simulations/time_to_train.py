"""Time to train one job on one GPU generation: step time (compute + exposed communication) x steps.

`TimeToTrain.predict` builds the generation's preset cluster with just enough nodes for the job, lays the
job's pods on consecutive nodes in tree order (pod i on node i: what an empty cluster gives every policy),
prices that layout with the cost model (`scheduler.placement.cost.estimate_cost`, the generation's link
bandwidths) and adds the compute of `scheduler.placement.steptime.StepTimeModel`.  Used by the calibration
against published MLPerf Training results (tests/calibration) and the generation example
(simulations/examples/generations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot
from scheduler.placement.steptime import StepTimeModel, flops_per_step
from topology.hardware import GENERATIONS, GpuGeneration
from topology.model import ClusterTopology

PRESET_OF_GENERATION = {"h100-sxm": "hgx-h100", "h200": "hgx-h200", "b200": "hgx-b200", "gb200": "gb200-nvl72"}
"""The cluster preset that carries each generation (its nodes' `nvidia.com/gpu.product` names the generation)."""


@dataclass(frozen=True)
class TrainingJob:
    """A job to time: its model, its parallelism and how many tokens it trains on."""

    model: ModelShape
    parallelism: Parallelism
    tokens: float

    @property
    def steps(self) -> float:
        """Optimizer steps: tokens / (global batch x sequence length)."""
        return self.tokens / (self.model.global_batch * self.model.seq)


@dataclass(frozen=True)
class StepBreakdown:
    """One step of a job on one generation: compute, communication and the total (seconds)."""

    compute: float
    comm: float
    step: float
    flops: float = field(default=0.0)


@lru_cache(maxsize=16)
def _cluster(preset: str, nodes: int) -> ClusterTopology:
    from simulations.cluster import ClusterSpec, build_cluster

    return build_cluster(ClusterSpec(preset, nodes), fast=False)


class TimeToTrain:
    """Predicts step time and time to train of a `TrainingJob` on a generation's preset cluster."""

    def __init__(self, model: StepTimeModel | None = None) -> None:
        self.model = model or StepTimeModel()

    def step(self, job: TrainingJob, generation: GpuGeneration, preset: str | None = None) -> StepBreakdown:
        """Compute, communication and step seconds of `job` on `generation` (its preset cluster unless given)."""
        from scheduler.placement.cost import estimate_cost
        from topology.presets import get_preset

        preset = preset or PRESET_OF_GENERATION[generation.name]
        per_node = get_preset(preset).gpus_per_node
        world = job.parallelism.world_size
        per_pod = min(per_node, world)
        pods = tuple(PodSlot(i, f"p{i}", per_pod) for i in range(world // per_pod))
        topo = _cluster(preset, len(pods))
        gang = Gang("calibration", "job", pods, parallelism=job.parallelism, model=job.model)
        comm = estimate_cost(gang, list(range(len(pods))), topo).step_comm_seconds
        compute = self.model.compute_seconds(job.model, job.parallelism, generation)
        return StepBreakdown(compute, comm, self.model.step_seconds(compute, comm), flops_per_step(job.model))

    def minutes(self, job: TrainingJob, generation: GpuGeneration | str) -> float:
        """Predicted minutes to train `job` on `generation` (a `GpuGeneration` or its name)."""
        gen = GENERATIONS[generation] if isinstance(generation, str) else generation
        return self.step(job, gen).step * job.steps / 60.0
