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

For `kueue-tas` runs (`SimConfig.kueue_slices`, default auto) each gang whose tensor-parallel group
spans pods also gets the Kueue slice annotations a competent user would set (`KueueSliceRule`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.placement.jobs import (
    AUTO_RANK_ORDER, DEFAULT_RANK_ORDER, Gang, ModelShape, Parallelism, PodSlot, parse_rank_order,
)
from simulations.config import KueueSlices
from topology.model import ClusterTopology

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
    steps: float | None = None
    """Training steps, for a job timed from its model (`simulations.speed`); None = relative to `duration`."""


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


def make_gang(job: SimJob, gpus_per_node: int, slices: "KueueSliceRule | None" = None,
              max_comm_ratio: float | None = None) -> Gang:
    """The gang of `job` on nodes of `gpus_per_node` GPUs (parallelism / model inferred if absent),
    with the Kueue slice annotations of `slices` when given and useful, and `meshfit.io/max-comm-ratio`."""
    per_pod = pod_gpus(job, gpus_per_node)
    pods = tuple(PodSlot(i, f"{job.job_id}-{i}", per_pod) for i in range(job.gpus // per_pod))
    gang = Gang(SIM_NAMESPACE, job.job_id, pods,
                parallelism=job.parallelism or infer_parallelism(job.gpus),
                model=job.model or default_model(job.gpus), priority=job.priority)
    if max_comm_ratio is not None:
        gang = replace(gang, constraint=replace(gang.constraint, max_comm_ratio=max_comm_ratio))
    return slices.annotate(gang) if slices is not None else gang


def tp_pods(gang: Gang) -> int:
    """Consecutive pods holding one whole tensor-parallel group (tp innermost, tp a multiple of the pod's
    GPUs); 1 when a group fits inside a pod or pods do not hold whole groups."""
    tp, per_pod = gang.parallelism.tp, gang.gpus_per_pod
    if tp <= per_pod or tp % per_pod:
        return 1
    order = parse_rank_order(DEFAULT_RANK_ORDER if gang.rank_order == AUTO_RANK_ORDER else gang.rank_order)
    innermost = next(axis for axis in order if gang.parallelism.degree(axis) > 1)
    return tp // per_pod if innermost == "tp" else 1


class KueueSliceRule:
    """The slice annotations a competent Kueue user sets: one slice per tensor-parallel group's pods,
    required inside one domain of the deepest level that has a domain holding a slice (GB200: the
    NVL72 NVLink domain); the pod set prefers that level (Kueue wants it at or above the slice level)."""

    def __init__(self, topo: ClusterTopology) -> None:
        self.topo = topo
        self.levels: dict[tuple[int, int], int | None] = {}

    def slice_level(self, per_pod: int, size: int) -> int | None:
        """Deepest level with a domain that can hold `size` pods of `per_pod` GPUs (None if none)."""
        key = (per_pod, size)
        if key not in self.levels:
            topo = self.topo
            paths = np.array([n.path for n in topo.nodes], dtype=np.int64).reshape(len(topo.nodes), -1)
            pods = np.array([n.gpus_total // per_pod for n in topo.nodes], dtype=np.int64)
            held = np.bincount(paths.ravel(), weights=np.repeat(pods, paths.shape[1]), minlength=len(topo.domains))
            level_of = np.array([d.level for d in topo.domains], dtype=np.int64)
            fitting = level_of[held >= size]
            self.levels[key] = int(fitting.max()) if fitting.size else None
        return self.levels[key]

    def annotate(self, gang: Gang) -> Gang:
        """`gang` with slice level / size (and, without a podset level, preferred = the slice level)."""
        size = tp_pods(gang)
        level = self.slice_level(gang.gpus_per_pod, size) if size > 1 else None
        if level is None:
            return gang
        name = self.topo.levels[level].name
        constraint = gang.constraint
        podset = {} if constraint.required_level or constraint.preferred_level else {"preferred_level": name}
        return replace(gang, constraint=replace(constraint, slice_required_level=name, slice_size=size, **podset))


def kueue_slice_rule(topo: ClusterTopology, policy: str, mode: KueueSlices | str) -> KueueSliceRule | None:
    """The slice rule for one run: `kueue-tas` under auto, every policy under all, none under off."""
    mode = KueueSlices(mode)
    wanted = mode == KueueSlices.all or (mode == KueueSlices.auto and policy == "kueue-tas")
    return KueueSliceRule(topo) if wanted else None
