"""Metrics of one simulation run: time series samples, per-job records and the DESIGN summary row.

Every metric is named for what it measures (definitions and units also in simulations/README.md):

- JCT = completion - submit; queueing delay = first start - submit (completed jobs).
- `jct_slowdown_mean` = mean over completed jobs of JCT / ideal runtime (the trace duration, floored at
  `SLOWDOWN_FLOOR_SECONDS` so a 1-second job does not dominate; >= 1): queueing *and* layout stretch.
- `comm_slowdown_mean` = mean runtime stretch of completed jobs: runtime on their layouts / ideal runtime
  (`config.RuntimeModel`; queueing not included).
- `gpu_allocation` = GPU-seconds held by running jobs / (all GPUs x time) over the arrival window [first
  submit, last submit] (the whole run when all jobs arrive at once), so a long drain tail does not dilute
  it.  A policy whose layouts stretch runtimes holds GPUs longer for the same work, so a *higher*
  allocation is not better by itself.  `utilization` is the same number under its DESIGN name (an alias).
- `useful_work` = the same window's GPU-seconds of progress at ideal speed / (all GPUs x time): each
  running job counts GPUs / its runtime stretch (work later lost to a failure still counts).  This is
  what `gpu_allocation` would be if every layout ran at its ideal speed; higher is better.
- fragmentation (per sample) = free GPUs on nodes too small for any waiting job's pod, as a share
  of all GPUs (0 when nobody waits); the summary gives the mean over samples.
- NVLink domains broken (per sample) = NVLink domains (hosts where the NVLink island is the node)
  with both free and used GPUs.
- ETTR (`summary.json`) = sum of GPUs x productive time / sum of GPUs x (completion - first start);
  `details.json` also has `ettr_submit`, the same over (completion - submission), so first queueing
  counts too.  Productive time = running time whose progress was kept (checkpointed or finished):
  it excludes work lost since the last checkpoint, restart cost, replacement waits and requeueing.
- goodput = sum of GPUs x productive time / GPU-seconds the jobs' pods held (held GPUs include
  restart time, lost work and GPUs kept idle while replacements come up; spares are not held).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulations.jobstate import DONE, RunJob

SUMMARY_KEYS = ("jobs", "completed", "jct_mean", "jct_p50", "jct_p99", "queue_mean", "utilization",
                "fragmentation_mean", "comm_slowdown_mean", "ettr", "gpu_allocation", "useful_work",
                "jct_slowdown_mean")
"""Per-policy keys of `summary.json`: the DESIGN ones in DESIGN order (`utilization` = `gpu_allocation`), then the
ones added since."""
SLOWDOWN_FLOOR_SECONDS = 10.0
"""Ideal runtimes shorter than this count as this long in `jct_slowdown_mean` (bounded slowdown, Feitelson's 10 s)."""
SAMPLE_COLUMNS = ("time", "busy_gpus", "gpu_allocation", "queued_jobs", "running_jobs", "free_gpus",
                  "stranded_gpus", "fragmentation", "nvlink_domains_broken", "nodes_down", "useful_work")
"""Time-series columns; `gpu_allocation` = GPUs held / all GPUs, `useful_work` = running GPUs weighted by
1 / runtime stretch / all GPUs (the summary's keys of the same names are their window averages)."""
JOB_COLUMNS = ("job_id", "gpus", "submit", "first_start", "end", "queue_delay", "jct", "status", "reason",
               "comm_slowdown", "comm_ratio", "widest_tier", "restarts", "productive_seconds", "lost_seconds")


def _round(value: float) -> float:
    return round(float(value), 6)


@dataclass
class RunResult:
    """Everything one (policy, cluster, workload, seed) run produced."""

    policy: str
    cluster: str
    seed: int
    total_gpus: int
    summary: dict[str, Any]
    details: dict[str, Any]
    samples: list[tuple] = field(default_factory=list)
    jobs: list[tuple] = field(default_factory=list)
    events: int = 0
    wall_seconds: float = 0.0


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def job_row(rj: RunJob) -> tuple:
    """One row of the per-job CSV."""
    done = rj.state == DONE
    first = rj.first_start
    return (rj.job.job_id, rj.gpus, _round(rj.job.submit), "" if first is None else _round(first),
            _round(rj.end) if done else "", "" if first is None else _round(first - rj.job.submit),
            _round(rj.end - rj.job.submit) if done else "", rj.state, rj.reason or "",
            _round(rj.mean_slowdown), _round(rj.comm_ratio), rj.tier, rj.restarts,
            _round(rj.productive), _round(rj.lost))


def summarize(jobs: list[RunJob], total_gpus: int, busy_gpu_seconds: float, span: tuple[float, float],
              samples: list[tuple], useful_gpu_seconds: float | None = None) -> dict[str, Any]:
    """The `summary.json` row of one policy; `busy_gpu_seconds` / `useful_gpu_seconds` are over `span`."""
    done = [rj for rj in jobs if rj.state == DONE]
    jct = np.array([rj.end - rj.job.submit for rj in done], dtype=np.float64)
    wait = np.array([rj.first_start - rj.job.submit for rj in done], dtype=np.float64)
    held = sum(rj.gpus * (rj.end - rj.first_start) for rj in done)
    productive = sum(rj.gpus * rj.productive for rj in done)
    capacity = total_gpus * max(span[1] - span[0], 1e-9)
    frag_col = SAMPLE_COLUMNS.index("fragmentation")
    allocation = _round(busy_gpu_seconds / capacity)
    return {
        "jobs": len(jobs),
        "completed": len(done),
        "jct_mean": _round(jct.mean()) if jct.size else 0.0,
        "jct_p50": _round(_percentile(jct, 50)),
        "jct_p99": _round(_percentile(jct, 99)),
        "queue_mean": _round(wait.mean()) if wait.size else 0.0,
        "utilization": allocation,
        "fragmentation_mean": _round(np.mean([s[frag_col] for s in samples])) if samples else 0.0,
        "comm_slowdown_mean": _round(np.mean([rj.mean_slowdown for rj in done])) if done else 1.0,
        "ettr": _round(productive / held) if held > 0 else 1.0,
        "gpu_allocation": allocation,
        "useful_work": _round((busy_gpu_seconds if useful_gpu_seconds is None else useful_gpu_seconds) / capacity),
        "jct_slowdown_mean": _round(np.mean([jct_slowdown(rj) for rj in done])) if done else 1.0,
    }


def jct_slowdown(rj: RunJob) -> float:
    """JCT over the ideal runtime (floored at `SLOWDOWN_FLOOR_SECONDS`), at least 1."""
    return max(1.0, (rj.end - rj.job.submit) / max(rj.ideal, SLOWDOWN_FLOOR_SECONDS))


def failure_metrics(jobs: list[RunJob], recovery: dict[str, int]) -> dict[str, Any]:
    """ETTR from submission, goodput and recovery counters of completed jobs (for `details.json`)."""
    done = [rj for rj in jobs if rj.state == DONE]
    productive = sum(rj.gpus * rj.productive for rj in done)
    since_submit = sum(rj.gpus * (rj.end - rj.job.submit) for rj in done)
    held = sum(rj.held for rj in done)
    return {**recovery,
            "ettr_submit": _round(productive / since_submit) if since_submit > 0 else 1.0,
            "goodput": _round(productive / held) if held > 0 else 1.0}


def details(jobs: list[RunJob], counters: dict[str, int], span: tuple[float, float]) -> dict[str, Any]:
    """Extra per-policy numbers for `details.json` (not part of the DESIGN summary)."""
    done = [rj for rj in jobs if rj.state == DONE]
    multi = [rj.mean_slowdown for rj in done if len(rj.gang.pods) > 1]
    reasons: dict[str, int] = {}
    for rj in jobs:
        if rj.state != DONE:
            reasons[rj.reason or rj.state] = reasons.get(rj.reason or rj.state, 0) + 1
    hours = max(span[1] - span[0], 1e-9) / 3600.0
    useful = sum(rj.gpus * rj.ideal for rj in done) / 3600.0
    return {
        **counters,
        "makespan_hours": _round(hours),
        "throughput_jobs_per_hour": _round(len(done) / hours),
        "useful_gpu_hours": _round(useful),
        "multi_pod_jobs": len(multi),
        "multi_pod_comm_slowdown_mean": _round(np.mean(multi)) if multi else 1.0,
        "restarts": sum(rj.restarts for rj in jobs),
        "lost_gpu_hours": _round(sum(rj.gpus * rj.lost for rj in jobs) / 3600.0),
        "not_completed": dict(sorted(reasons.items())),
    }
