"""Capacity planner: compare candidate topologies on the same workload with the same policy.

A candidate is a YAML file (unknown keys, and link overrides naming no level or role of the
candidate's cluster, are refused with a did-you-mean hint; see docs/file-formats.md)::

    name: hgx-4to1                     # optional (default: the file name)
    preset: hgx-h100                   # or  cluster: path/to/nodelist.json
    nodes: 64
    links:                             # topology-config link overrides by level name or role
      spine: {oversubscription: 4}
    price_per_gpu_hour: 2.5            # optional; enables cost to train
    gpu: {generation: h100-sxm}        # optional (see simulations.gpu_choice): generation, figures, mfu

Each candidate is simulated (in parallel, see `runner`) on its GPU generation (`simulations.speed`: trace jobs
scaled by the peak ratio to the trace GPU, jobs with a model and steps timed from their FLOPs).  Time to train =
makespan, first submit to last completion (hours); cost to train = price x the candidate's GPUs x time to train
(the cluster is paid for while the workload runs).  The ranking uses cost to train when every candidate has a
price, else time to train; the table shows both side by side.  Throughput = completed jobs per hour of makespan;
useful GPU-hours = sum of GPUs x ideal runtime on the candidate of completed jobs; cost per useful GPU-hour =
price x GPUs x makespan hours / useful GPU-hours.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from simulations.cluster import ClusterSpec
from simulations.gpu_choice import GpuChoice
from simulations.metrics import RunResult
from topology.config import LinkOverride
from topology.strict import StrictModel, validation_message
from topology.textfile import read_text


class PlanError(ValueError):
    """A candidate file that cannot be used (one line)."""


class Candidate(StrictModel):
    """One candidate topology."""

    name: str | None = None
    preset: str | None = None
    nodes: int = Field(default=0, ge=0)
    cluster: str | None = None
    links: dict[str, LinkOverride] = Field(default_factory=dict)
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    gpu: GpuChoice | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _one_source(self) -> "Candidate":
        if bool(self.preset) == bool(self.cluster):
            raise ValueError("give exactly one of preset (with nodes) or cluster")
        if self.preset and self.nodes < 1:
            raise ValueError("nodes must be at least 1 with a preset")
        return self

    def spec(self, default_name: str) -> ClusterSpec:
        """The picklable cluster spec of this candidate."""
        links = {key: value.model_dump(exclude_none=True) for key, value in self.links.items()}
        if self.gpu is None:
            return ClusterSpec(self.preset, self.nodes, self.cluster, links, self.seed, self.name or default_name)
        for role, bandwidth in self.gpu.link_bandwidths(_preset_generation(self.preset), links).items():
            links[role] = {**links.get(role, {}), **bandwidth}
        return ClusterSpec(self.preset, self.nodes, self.cluster, links, self.seed, self.name or default_name,
                           self.gpu.generation, self.gpu.figures(), self.gpu.mfu)


def _preset_generation(preset: str | None) -> str | None:
    """The generation a preset's `nvidia.com/gpu.product` names (None without a preset)."""
    from topology.hardware import generation_for_product
    from topology.presets import PRESETS

    found = generation_for_product(PRESETS[preset].gpu_product) if preset in PRESETS else None
    return found.name if found else None


def load_candidate(path: str | Path) -> tuple[Candidate, ClusterSpec]:
    """Read and validate one candidate YAML; PlanError on any problem."""
    import yaml

    target = Path(path)
    text = read_text(target, "candidate", PlanError)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError(f"candidate {target} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise PlanError(f"candidate {target} must be a mapping")
    try:
        candidate = Candidate.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"candidate {target}: {validation_message(exc, Candidate, 'candidate')}") from None
    if candidate.cluster and not Path(candidate.cluster).is_absolute():
        candidate = candidate.model_copy(update={"cluster": str(target.parent / candidate.cluster)})
    return candidate, candidate.spec(target.stem)


def plan_row(name: str, result: RunResult, price: float | None, gpu: str = "") -> dict[str, Any]:
    """One ranked-table row for a candidate's run."""
    summary, info = result.summary, result.details
    hours = info["makespan_hours"]
    useful = info["useful_gpu_hours"]
    cost = price * result.total_gpus * hours / useful if price is not None and useful > 0 else None
    to_train = round(price * result.total_gpus * hours, 2) if price is not None else None
    return {
        "candidate": name, "cluster": result.cluster, "gpus": result.total_gpus, "gpu": gpu,
        "policy": result.policy, "time_to_train_hours": hours, "cost_to_train": to_train,
        "completed": summary["completed"], "jobs": summary["jobs"],
        "throughput_jobs_per_hour": info["throughput_jobs_per_hour"],
        "jct_mean": summary["jct_mean"], "jct_p99": summary["jct_p99"], "queue_mean": summary["queue_mean"],
        "utilization": summary["utilization"], "gpu_allocation": summary["gpu_allocation"],
        "useful_work": summary["useful_work"], "comm_slowdown_mean": summary["comm_slowdown_mean"],
        "makespan_hours": hours, "useful_gpu_hours": useful,
        "price_per_gpu_hour": price, "cost_per_useful_gpu_hour": None if cost is None else round(cost, 4),
    }


def rank_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Rows ranked best first (by cost to train when every row is priced, else time to train) and the key used."""
    priced = all(row["cost_to_train"] is not None for row in rows)
    key = "cost_to_train" if priced else "time_to_train_hours"
    ranked = sorted(rows, key=lambda row: (-row["completed"], row[key], row["candidate"]))
    for rank, row in enumerate(ranked, 1):
        row["rank"] = rank
    return ranked, key


def run_plan(candidate_files: list[Path], workload_file: Path | None, synthetic: int | None, load: float,
             arrival_scale: float, policy: str, config: Any, workers: int | None, dask: str | None,
             out: Path | None, show_progress: bool = False) -> dict[str, Any]:
    """Simulate every candidate on one workload; the ranked plan document (written to `out` if given)."""
    import json

    from simulations import session
    from simulations.runner import RunSpec

    session.check_policies([policy])
    loaded = []
    for path in candidate_files:
        try:
            candidate, spec = load_candidate(path)
        except PlanError as exc:
            raise session.InputError(str(exc)) from None
        gpus, gpu = _gpus(spec, path, session.InputError)
        loaded.append((candidate, spec, gpus, gpu))
    smallest = min(gpus for _, _, gpus, _ in loaded)
    workload = session.load_workload(workload_file, synthetic, smallest, config.seed, load, arrival_scale)
    specs = [RunSpec(spec, policy, config) for _, spec, _, _ in loaded]
    results, wall = session.execute(specs, workload, workers, dask, show_progress)
    rows = [plan_row(spec.label(), result, candidate.price_per_gpu_hour, gpu)
            for (candidate, spec, _, gpu), result in zip(loaded, results)]
    ranked, key = rank_rows(rows)
    document = {"workload": workload.source, "jobs": len(workload.jobs), "policy": policy, "ranked_by": key,
                "candidates": ranked, "wall_seconds": round(wall, 3)}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        from simulations.plots import plot_allocation, plot_jct_cdf, plot_plan, plot_useful_work

        plot_plan(out / "plan.png", ranked)
        plot_jct_cdf(out / "jct_cdf.png", results, False, multi_cluster=True)
        plot_allocation(out / "gpu_allocation.png", results, False, multi_cluster=True)
        plot_useful_work(out / "useful_work.png", results, False, multi_cluster=True)
    return document


def _gpus(spec: ClusterSpec, path: Path, error: type[Exception]) -> tuple[int, str]:
    """GPUs of a candidate's cluster and its GPU generation's name (building it once validates it)."""
    from simulations.cluster import build_cluster
    from topology.model import TopologyError

    try:
        topo = build_cluster(spec, fast=False)
        hardware = spec.hardware(topo)
    except TopologyError as exc:
        raise error(f"candidate {path}: {exc}") from None
    return topo.gpus_total, hardware.name if hardware else "unknown"
