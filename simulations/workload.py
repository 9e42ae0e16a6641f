"""Simulated jobs: what a trace says about a job, and how it becomes a `Gang` on a given cluster.

A trace gives each job a submit time, an ideal runtime (the runtime under an ideal placement)
and a GPU count, optionally its parallelism and model shape.  When a trace has no parallelism it
is inferred (`infer_parallelism`): tensor parallelism inside the largest divisor of the GPU count
that is at most `max_tp` (8 by default, `--max-tp`), then pipeline stages once the job has many
tensor groups, the rest data parallel.  The tp degree does not depend on the node size: pods are
sized by the cluster (each pod takes the largest divisor of the job's GPUs that fits on one node: 8
on HGX, 4 on GB200 trays), so a 64-GPU job is 8 pods of 8 on HGX with each tp=8 group inside one
node, and 16 pods of 4 on GB200 with each tp=8 group spanning two trays, which is only fast when both
trays share an NVL72 NVLink domain (`--max-tp 16`: four trays).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.jobs import Gang, ModelShape, Parallelism, PodSlot

SIM_NAMESPACE = "sim"
"""Namespace of every simulated gang."""


@dataclass
class SimJob:
    """One job of a workload, as the trace describes it (times in seconds)."""

    job_id: str
    submit: float
    duration: float
    gpus: int
    parallelism: Parallelism | None = None
    model: ModelShape | None = None
    priority: int = 0
    kind: str = ""


@dataclass
class Workload:
    """A list of jobs sorted by submit time, and how it was obtained (for reports)."""

    jobs: list[SimJob]
    source: str
    method: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.jobs.sort(key=lambda j: (j.submit, j.job_id))

    @property
    def gpu_seconds(self) -> float:
        """Total ideal GPU-seconds the workload asks for."""
        return sum(j.gpus * j.duration for j in self.jobs)


def largest_divisor_at_most(number: int, limit: int) -> int:
    """The largest divisor of `number` that is <= `limit` (at least 1)."""
    for candidate in range(min(number, max(limit, 1)), 0, -1):
        if number % candidate == 0:
            return candidate
    return 1


DEFAULT_MAX_TP = 8
"""Largest inferred tensor-parallel degree (one HGX node; two GB200 trays)."""


def infer_parallelism(gpus: int, data_parallel_only: bool = False, max_tp: int = DEFAULT_MAX_TP) -> Parallelism:
    """A plausible 3D layout for `gpus` GPUs: tp within `max_tp`, pp once there are >= 8 tp groups, dp rest."""
    if data_parallel_only or gpus == 1:
        return Parallelism(dp=gpus)
    tp = largest_divisor_at_most(gpus, max_tp)
    groups = gpus // tp
    pp = 1
    if groups >= 32 and groups % 8 == 0:
        pp = 8 if groups >= 128 else 4
    elif groups >= 16 and groups % 4 == 0:
        pp = 4
    elif groups >= 8 and groups % 2 == 0:
        pp = 2
    return Parallelism(tp=tp, pp=pp, dp=groups // pp)


def default_model(gpus: int) -> ModelShape:
    """A model shape typical for a job of this size (7B dense up to 32 GPUs, then 13B, 34B, 70B)."""
    if gpus <= 32:
        return ModelShape()
    if gpus <= 128:
        return ModelShape(params=13e9, layers=40, hidden=5120)
    if gpus <= 512:
        return ModelShape(params=34e9, layers=48, hidden=8192)
    return ModelShape(params=70e9, layers=80, hidden=8192)


def pod_gpus(job: SimJob, gpus_per_node: int) -> int:
    """GPUs per pod of `job` on nodes of `gpus_per_node` GPUs (largest divisor that fits one node)."""
    return largest_divisor_at_most(job.gpus, gpus_per_node)


def make_gang(job: SimJob, gpus_per_node: int) -> Gang:
    """The gang of `job` on nodes of `gpus_per_node` GPUs (parallelism / model inferred if absent)."""
    per_pod = pod_gpus(job, gpus_per_node)
    pods = tuple(PodSlot(i, f"{job.job_id}-{i}", per_pod) for i in range(job.gpus // per_pod))
    return Gang(SIM_NAMESPACE, job.job_id, pods,
                parallelism=job.parallelism or infer_parallelism(job.gpus),
                model=job.model or default_model(job.gpus), priority=job.priority)
