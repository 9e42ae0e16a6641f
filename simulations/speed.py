"""How fast one run's cluster trains each job: the GPU generation's speed and the layout's stretch.

Two kinds of jobs (see `simulations.config` and docs/cost-model.md):

- **Trace jobs** (no model and steps): today's relative model.  Compute per step is set from the lower bound
  (`comm_fraction`) on the trace GPU and scaled by `r = peak(trace GPU) / peak(this cluster's GPU)`, so the ideal
  runtime here is `duration x RuntimeModel.ideal_scale(r)` and a layout stretches it by
  `RuntimeModel.slowdown(c, c*, r)`.  With the trace's own GPU (r = 1) nothing changes.
- **Model jobs** (a model and `steps`): compute per step `C = FLOPs / (GPUs x peak x mfu)` with the pipeline
  bubble (`scheduler.placement.steptime`); ideal runtime `steps x (C + (1 - o) c*)`, stretch
  `(C + (1 - o) c) / (C + (1 - o) c*)`.

`RunJob.work_left` and `RunJob.ideal` are in seconds of ideal-layout training on *this* cluster.
"""

from __future__ import annotations

from scheduler.placement.steptime import StepTimeModel
from simulations.config import RuntimeModel
from simulations.jobstate import RunJob
from topology.hardware import GpuGeneration, get_generation
from topology.model import ClusterTopology


class RunSpeed:
    """The GPU generation of one run and each job's ideal runtime and layout stretch on it."""

    def __init__(self, runtime: RuntimeModel, hardware: GpuGeneration | None, topo: ClusterTopology,
                 mfu: float | None = None) -> None:
        self.runtime, self.topo = runtime, topo
        self.trace_gpu = get_generation(runtime.trace_gpu)
        self.hardware = hardware or self.trace_gpu
        self.compute_scale = self.trace_gpu.dense_bf16_tflops / self.hardware.dense_bf16_tflops
        self.steptime = StepTimeModel(mfu if mfu is not None else runtime.mfu, runtime.overlap)

    def prepare(self, rj: RunJob) -> None:
        """Set `rj`'s ideal runtime on this cluster (and its compute per step when it gives model and steps)."""
        job = rj.job
        if job.steps is None or job.model is None:
            rj.ideal = job.duration * self.runtime.ideal_scale(self.compute_scale)
        else:
            from scheduler.placement.cost import lower_bound_seconds

            rj.compute = self.steptime.compute_seconds(rj.gang.model, rj.gang.parallelism, self.hardware)
            rj.ideal = job.steps * self.steptime.step_seconds(rj.compute, lower_bound_seconds(rj.gang, self.topo))
        rj.work_left = rj.ideal

    def stretch(self, rj: RunJob, step_comm: float, lower_bound: float) -> float:
        """Runtime multiplier of `rj` on a layout with step communication `step_comm` (bound `lower_bound`)."""
        if rj.compute is None:
            return self.runtime.slowdown(step_comm, lower_bound, self.compute_scale)
        if lower_bound <= 0.0:
            return 1.0
        exposed = 1.0 - self.steptime.overlap
        return max(1.0, (rj.compute + exposed * step_comm) / (rj.compute + exposed * lower_bound))
