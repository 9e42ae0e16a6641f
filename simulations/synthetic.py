"""Synthetic LLM-era workloads calibrated to AcmeTrace's per-cluster statistics.

A job is either *small* (1-8 GPUs: debugging, evaluation, fine-tuning) or *large* (64-1,024 GPU
3D-parallel pre-training).  Sizes within each class follow fixed shapes (below); the share of
large jobs is solved so the mean GPUs per job equals the cluster's `avg_gpu_num` (Kalos: 26.77), and
the largest size is capped at its `max_gpu` (Kalos: 1,024).  Runtimes are log-normal with the
cluster's median and mean GPU-job runtime (Kalos: 124 s and 1,259.7 s, so sigma = sqrt(2 ln(mean /
median)) = 2.15), capped at `max_run_time_gpu`.  Arrivals are Poisson at the rate that offers
`load` x the cluster's GPUs: rate = load x GPUs / E[GPUs x runtime].  Large jobs get tp=8 (`max_tp`) and
pipeline / data parallelism from their size (`infer_parallelism`) and a model shape by size.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

from simulations.traces import TraceError
from simulations.workload import DEFAULT_MAX_TP, SimJob, Workload, default_model, infer_parallelism

SUMMARY_FILE = Path(__file__).parent / "data" / "acmetrace_cluster_summary.csv"
SMALL_SIZES = ((1, 0.70), (2, 0.08), (4, 0.10), (8, 0.12))
"""(GPUs, weight) of small jobs: mostly single-GPU, as in every AcmeTrace cluster (median 1)."""
LARGE_SIZES = ((64, 0.40), (128, 0.25), (256, 0.18), (512, 0.12), (1024, 0.05))
"""(GPUs, weight) of large 3D-parallel jobs."""


@dataclass(frozen=True)
class ClusterStats:
    """The AcmeTrace statistics the generator is calibrated to (GPU jobs only)."""

    name: str
    mean_gpus: float
    max_gpus: int
    median_runtime: float
    mean_runtime: float
    max_runtime: float


KALOS = ClusterStats("Kalos", 26.77, 1024, 124.0, 1259.689, 625740.0)
"""Kalos (InternLM's LLM cluster) from AcmeTrace `data/cluster_summary.csv`."""


def load_cluster_stats(name: str = "Kalos", path: str | Path | None = None) -> ClusterStats:
    """Statistics of cluster `name` from an AcmeTrace `cluster_summary.csv` (bundled Kalos if no file)."""
    source = Path(path) if path else SUMMARY_FILE
    if not source.exists():
        if name == KALOS.name:
            return KALOS
        raise TraceError(f"cluster summary {source} does not exist")
    with source.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("id") == name:
                try:
                    return ClusterStats(name, float(row["avg_gpu_num"]), int(float(row["max_gpu"])),
                                        float(row["med_run_time_gpu"]), float(row["avg_run_time_gpu"]),
                                        float(row["max_run_time_gpu"]))
                except (KeyError, ValueError) as exc:
                    raise TraceError(f"{source}: bad statistics for {name}: {exc}") from None
    raise TraceError(f"{source}: no cluster called {name!r}")


def _mean(sizes: tuple[tuple[int, float], ...]) -> float:
    total = sum(w for _, w in sizes)
    return sum(g * w for g, w in sizes) / total


def size_classes(stats: ClusterStats, cap: int | None = None) -> tuple[float, list[tuple[int, float]]]:
    """(share of large jobs, large sizes) so the mean GPUs per job matches `stats.mean_gpus`."""
    limit = min(stats.max_gpus, cap or stats.max_gpus)
    large = [(g, w) for g, w in LARGE_SIZES if g <= limit] or [(max(8, limit), 1.0)]
    small_mean, large_mean = _mean(SMALL_SIZES), _mean(tuple(large))
    if large_mean <= small_mean:
        return 0.0, large
    share = (stats.mean_gpus - small_mean) / (large_mean - small_mean)
    return min(max(share, 0.0), 1.0), large


def runtime_sigma(stats: ClusterStats) -> float:
    """Log-normal sigma giving the cluster's mean / median runtime ratio."""
    return math.sqrt(2.0 * math.log(max(stats.mean_runtime / stats.median_runtime, 1.0)))


def _pick(rng: random.Random, sizes: list[tuple[int, float]] | tuple[tuple[int, float], ...]) -> int:
    return rng.choices([g for g, _ in sizes], weights=[w for _, w in sizes])[0]


def generate(jobs: int, cluster_gpus: int, seed: int = 0, load: float = 0.9,
             stats: ClusterStats = KALOS, max_gpus: int | None = None, max_tp: int = DEFAULT_MAX_TP) -> Workload:
    """`jobs` synthetic LLM-era jobs offering `load` x `cluster_gpus` GPUs on average (deterministic)."""
    if jobs < 1 or cluster_gpus < 1 or load <= 0:
        raise TraceError("synthetic workload needs jobs >= 1, cluster GPUs >= 1 and load > 0")
    rng = random.Random(f"meshfit-synthetic:{seed}")
    share, large = size_classes(stats, min(max_gpus or cluster_gpus, cluster_gpus))
    sigma = runtime_sigma(stats)
    mu = math.log(stats.median_runtime)
    mean_gpus = (1 - share) * _mean(SMALL_SIZES) + share * _mean(tuple(large))
    rate = load * cluster_gpus / (mean_gpus * stats.mean_runtime)
    now, out = 0.0, []
    for index in range(jobs):
        is_large = rng.random() < share
        gpus = _pick(rng, large if is_large else SMALL_SIZES)
        duration = min(max(rng.lognormvariate(mu, sigma), 1.0), stats.max_runtime)
        out.append(SimJob(f"syn-{index:06d}", round(now, 3), round(duration, 3), gpus,
                          infer_parallelism(gpus, max_tp=max_tp), default_model(gpus), kind="large" if is_large else "small"))
        now += rng.expovariate(rate)
    method = (f"synthetic LLM mix calibrated to AcmeTrace {stats.name}: {share:.1%} large jobs, "
              f"log-normal runtimes (median {stats.median_runtime:g} s, mean {stats.mean_runtime:g} s), "
              f"Poisson arrivals at load {load:g}" + (f", tp up to {max_tp}" if max_tp != DEFAULT_MAX_TP else ""))
    return Workload(out, f"synthetic:{jobs}:seed={seed}", method)
