"""Simulation settings: queue discipline, runtime (compute / communication) model, failures.

**Runtime model.**  A trace's `duration_seconds` is the runtime under an ideal placement.  The cost
model gives, per training step, the communication time `c` of the actual layout and the lower bound
`c*` (every group on the best tier it could fit in).  We assume that at the ideal placement
communication is `comm_fraction` (default 20%) of the raw step work, so compute per step is
`C = c* (1 - f) / f`, and that an `overlap` share (default 50%) of communication hides behind
compute, so the step takes `C + (1 - overlap) c`.  Steps = duration / (C + (1 - overlap) c*), and the
runtime on the actual layout is duration x slowdown with

    slowdown = (C + (1 - overlap) c) / (C + (1 - overlap) c*)  (>= 1; 1 when c* = 0).

**GPU generations** (`simulations.speed.RunSpeed`).  The trace was recorded on `trace_gpu` (default `h100-sxm`);
on a cluster of another generation (its nodes' `nvidia.com/gpu.product`, or a plan candidate's `gpu`) a job
without a model runs its compute `r = peak(trace GPU) / peak(candidate GPU)` times as long (dense BF16 peaks of
`topology.hardware`): C becomes `r C`, so its ideal runtime is `duration x (r C + (1 - overlap) c*) / (C + (1 -
overlap) c*)` and its slowdown uses `r C`.  A job that gives its model and its `steps` is timed absolutely:
`steps x (FLOPs / (GPUs x peak x mfu) + (1 - overlap) c)` (`scheduler.placement.steptime`, `mfu` 0.40 by default).

**Failures.**  Each node fails after an exponential time with mean `node_mtbf_hours` (0 disables
failures) and is repaired after an exponential time with mean `repair_hours`; each node draws from
its own seeded stream, so every policy sees the same failures.  A job with a pod on a failed node is
killed, loses the work since its last checkpoint (every `checkpoint_minutes` of running, written
asynchronously) and rejoins the queue at its original position; every restart first pays
`restart_minutes`.  What happens to the rest of a killed gang is the `Recovery` policy
(`simulations.recovery`): restart the whole job (the default), replace one node at a time, or replace
every failed node at once from spares first (meshfit).  ETTR and goodput: `simulations.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Backfill(str, Enum):
    """How jobs may overtake a blocked queue head."""

    easy = "easy"
    """EASY: a later job may start now only if it does not delay the head's reservation."""
    none = "none"
    """Strict order: nothing starts while the head waits."""
    aggressive = "aggressive"
    """Any job that fits starts (no reservation; the head may starve)."""


class KueueSlices(str, Enum):
    """Whether `kueue-tas` runs give gangs the Kueue slice annotations a competent user would set."""

    auto = "auto"
    """Slice = one tensor-parallel group's pods, inside one domain of the smallest level that holds it."""
    all = "all"
    """The same slice annotations for every policy's gangs (a hard constraint for all of them)."""
    off = "off"
    """No slice annotations (Kueue TAS with podset-level constraints only)."""


class QueueOrder(str, Enum):
    """Order of the waiting queue."""

    fifo = "fifo"
    """Submit time."""
    priority = "priority"
    """Higher priority first, then submit time."""


@dataclass(frozen=True)
class RuntimeModel:
    """Compute / communication split used to stretch runtimes with the placement (see module doc)."""

    comm_fraction: float = 0.2
    overlap: float = 0.5
    mfu: float = 0.40
    """Share of the GPU's dense peak reached on compute, for jobs that give their model and steps."""
    trace_gpu: str = "h100-sxm"
    """GPU generation the trace's durations were measured on (`topology.hardware.GENERATIONS`)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.comm_fraction < 1.0:
            raise ValueError("comm fraction must be between 0 and 1 (exclusive)")
        if not 0.0 <= self.overlap < 1.0:
            raise ValueError("overlap must be in [0, 1)")
        if not 0.0 < self.mfu <= 1.0:
            raise ValueError("mfu must be in (0, 1]")

    def slowdown(self, step_comm: float, lower_bound: float, compute_scale: float = 1.0) -> float:
        """Runtime multiplier of a layout with step communication `step_comm` vs the ideal `lower_bound`, with
        compute per step `compute_scale` times the trace GPU's (the peak ratio of trace GPU to this GPU)."""
        if lower_bound <= 0.0:
            return 1.0
        compute = lower_bound * (1.0 - self.comm_fraction) / self.comm_fraction * compute_scale
        exposed = 1.0 - self.overlap
        return max(1.0, (compute + exposed * step_comm) / (compute + exposed * lower_bound))

    def ideal_scale(self, compute_scale: float) -> float:
        """Ideal runtime on a GPU whose compute per step is `compute_scale` times the trace GPU's, over the
        trace's duration: (r C + (1 - o) c*) / (C + (1 - o) c*) with C = c* (1 - f) / f (c* cancels)."""
        if compute_scale == 1.0:
            return 1.0
        compute = (1.0 - self.comm_fraction) / self.comm_fraction
        exposed = 1.0 - self.overlap
        return (compute * compute_scale + exposed) / (compute + exposed)


class Recovery(str, Enum):
    """What happens to a running gang when one of its nodes fails."""

    restart = "restart"
    """Volcano-like: kill the whole gang, requeue it at its position, place it again from scratch."""
    replace_one = "replace-one"
    """Kueue-like: keep the other pods; replace failed nodes one at a time, each paying `replace_minutes`."""
    meshfit = "meshfit"
    """Keep the rank map; replace every failed node at once (spares first, nearest domain first)."""


@dataclass(frozen=True)
class FailureModel:
    """Node failure / repair rates and the checkpoint-restart model (0 MTBF = no failures)."""

    node_mtbf_hours: float = 0.0
    repair_hours: float = 4.0
    checkpoint_minutes: float = 30.0
    restart_minutes: float = 5.0
    recovery: Recovery = Recovery.restart
    spares: float = 0.0
    """Share of each leaf domain's nodes held back as spares (rounded up per leaf; 0 = none)."""
    replace_minutes: float = 3.0
    """Time to bring up the pods of one replacement node (recreate, bind, start) before training resumes."""
    scripted: tuple[tuple[float, int, float], ...] = ()
    """(time seconds, node index, repair seconds) failures used instead of random ones (tests, what-ifs)."""

    def __post_init__(self) -> None:
        if min(self.node_mtbf_hours, self.repair_hours, self.checkpoint_minutes, self.restart_minutes,
               self.replace_minutes) < 0:
            raise ValueError("failure settings must be non-negative")
        if not 0.0 <= self.spares < 1.0:
            raise ValueError("spares must be a share in [0, 1)")
        object.__setattr__(self, "recovery", Recovery(self.recovery))

    @property
    def requeue_seconds(self) -> float:
        """What a requeued gang pays before training resumes: restart, plus (whole-gang restart) its pods' bring-up."""
        bring_up = self.replace_minutes * 60.0 if self.recovery == Recovery.restart and self.enabled else 0.0
        return self.restart_minutes * 60.0 + bring_up

    @property
    def enabled(self) -> bool:
        """True when nodes fail at all."""
        return self.node_mtbf_hours > 0 or bool(self.scripted)


@dataclass(frozen=True)
class SimConfig:
    """Everything besides cluster, workload and policy that shapes one simulation run."""

    backfill: Backfill = Backfill.easy
    queue: QueueOrder = QueueOrder.fifo
    runtime: RuntimeModel = RuntimeModel()
    failures: FailureModel = FailureModel()
    seed: int = 0
    backfill_depth: int = 256
    """At most this many queued jobs are considered per scheduling pass (Slurm's bf_max_job_test)."""
    samples: int = 400
    """Target number of time-series samples over the trace's arrival span."""
    horizon_seconds: float | None = None
    """Stop at this simulated time; unfinished jobs are reported as not completed."""
    max_comm_ratio: float | None = None
    """Every gang's `meshfit.io/max-comm-ratio` (wait rather than start on a worse layout); None = no limit."""
    kueue_slices: KueueSlices = KueueSlices.auto
    """Kueue slice annotations per gang, for `kueue-tas` runs (auto), every run (all) or none (off): `simulations.workload.kueue_slice_rule`."""
