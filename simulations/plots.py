"""Matplotlib (Agg) plots: JCT CDF, GPU allocation and useful work over time, queue length, planner bars.

Every run gets its own colour, marker and line style, so runs that coincide stay visible (later
runs are drawn thinner on top of earlier ones); every plot has a title and units.  Each time-series plot
shows the quantity the summary table reports under the same name (`gpu_allocation`: GPUs held;
`useful_work`: GPUs weighted by 1 / runtime stretch), so table and plot never disagree on what they mean.
"""

from __future__ import annotations

from itertools import cycle
from pathlib import Path
from typing import Any, Iterator

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simulations.metrics import JOB_COLUMNS, SAMPLE_COLUMNS, RunResult  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
MARKS_PER_LINE = 12
"""Markers drawn along each line (not on every point, so dense series stay readable)."""
ALLOCATION_TITLE = "gpu_allocation: share of GPUs held by running jobs"
USEFUL_WORK_TITLE = "useful_work: share of GPUs doing work at ideal speed (GPUs held / runtime stretch)"
QUEUE_TITLE = "Queued jobs over time"


def series_styles() -> Iterator[dict[str, Any]]:
    """Endless distinct styles: colour, marker and line style change together; width shrinks per run."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (colour, marker, style) in enumerate(zip(cycle(colours), cycle(MARKERS), cycle(LINESTYLES))):
        yield {"color": colour, "marker": marker, "linestyle": style, "linewidth": max(2.2 - 0.3 * index, 0.8),
               "markersize": 5, "markerfacecolor": "none", "alpha": 0.9}


def _label(result: RunResult, multi_seed: bool, multi_cluster: bool = False) -> str:
    parts = [result.policy]
    if multi_cluster:
        parts.append(result.cluster)
    if multi_seed:
        parts.append(f"seed {result.seed}")
    return " / ".join(parts)


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _marks(points: int) -> int:
    return max(points // MARKS_PER_LINE, 1)


def plot_jct_cdf(path: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """Empirical CDF of job completion times per run (log x axis)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    col = JOB_COLUMNS.index("jct")
    for result, style in zip(results, series_styles()):
        jct = np.sort(np.array([row[col] for row in result.jobs if row[col] != ""], dtype=float))
        if jct.size:
            ax.step(np.maximum(jct, 1.0), np.arange(1, jct.size + 1) / jct.size, where="post",
                    label=_label(result, multi_seed, multi_cluster), markevery=_marks(jct.size), **style)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs completed")
    ax.set_title("Job completion time CDF")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_series(path: Path, results: list[RunResult], column: str, ylabel: str, multi_seed: bool,
                multi_cluster: bool = False, title: str | None = None) -> None:
    """One time-series column per run against simulated hours, titled (default: the y label over time)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    index = SAMPLE_COLUMNS.index(column)
    for result, style in zip(results, series_styles()):
        if result.samples:
            times = np.array([row[0] for row in result.samples], dtype=float) / 3600.0
            ax.plot(times, [row[index] for row in result.samples], label=_label(result, multi_seed, multi_cluster),
                    markevery=_marks(len(times)), **style)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel(ylabel)
    ax.set_title(title or f"{ylabel} over time")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_allocation(path: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """`gpu_allocation` over time: GPUs held by running jobs, as a share of the cluster's GPUs (0-1)."""
    plot_series(path, results, "gpu_allocation", "GPUs held / all GPUs (0-1)", multi_seed, multi_cluster,
                title=ALLOCATION_TITLE)


def plot_useful_work(path: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """`useful_work` over time: running GPUs weighted by 1 / runtime stretch, as a share of all GPUs (0-1)."""
    plot_series(path, results, "useful_work", "GPUs at ideal speed / all GPUs (0-1)", multi_seed, multi_cluster,
                title=USEFUL_WORK_TITLE)


def plot_runs(out_dir: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """The standard plot set of a simulation directory."""
    plot_jct_cdf(out_dir / "jct_cdf.png", results, multi_seed, multi_cluster)
    plot_allocation(out_dir / "gpu_allocation.png", results, multi_seed, multi_cluster)
    plot_useful_work(out_dir / "useful_work.png", results, multi_seed, multi_cluster)
    plot_series(out_dir / "queue_length.png", results, "queued_jobs", "queued jobs (count)", multi_seed,
                multi_cluster, title=QUEUE_TITLE)


def plot_plan(path: Path, rows: list[dict[str, Any]]) -> None:
    """Bar charts comparing planner candidates: time to train and cost to train side by side, mean JCT, useful work."""
    names = [f"{row['candidate']}\n({row.get('gpu') or '?'})" for row in rows]
    metrics = [("time_to_train_hours", "time to train (makespan)", "hours"),
               ("cost_to_train", "cost to train (price x GPUs x time)", "price units"),
               ("jct_mean", "mean JCT", "seconds"), ("useful_work", "useful_work (GPUs at ideal speed)", "share 0-1")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4))
    for ax, (key, title, unit) in zip(axes, metrics):
        values = [row.get(key) or 0.0 for row in rows]
        ax.bar(range(len(names)), values, color="tab:blue")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Candidate topologies on the same workload")
    _save(fig, path)
