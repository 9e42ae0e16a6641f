"""Matplotlib (Agg) plots: JCT CDF, utilisation over time, queue length over time, planner bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simulations.metrics import JOB_COLUMNS, SAMPLE_COLUMNS, RunResult  # noqa: E402


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


def plot_jct_cdf(path: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """Empirical CDF of job completion times per run (log x axis)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    col = JOB_COLUMNS.index("jct")
    for result in results:
        jct = np.sort(np.array([row[col] for row in result.jobs if row[col] != ""], dtype=float))
        if jct.size:
            ax.step(np.maximum(jct, 1.0), np.arange(1, jct.size + 1) / jct.size, where="post",
                    label=_label(result, multi_seed, multi_cluster))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_series(path: Path, results: list[RunResult], column: str, ylabel: str, multi_seed: bool,
                multi_cluster: bool = False) -> None:
    """One time-series column per run against simulated hours."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    index = SAMPLE_COLUMNS.index(column)
    for result in results:
        if result.samples:
            times = np.array([row[0] for row in result.samples], dtype=float) / 3600.0
            ax.plot(times, [row[index] for row in result.samples], linewidth=1.0,
                    label=_label(result, multi_seed, multi_cluster))
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_runs(out_dir: Path, results: list[RunResult], multi_seed: bool, multi_cluster: bool = False) -> None:
    """The standard plot set of a simulation directory."""
    plot_jct_cdf(out_dir / "jct_cdf.png", results, multi_seed, multi_cluster)
    plot_series(out_dir / "utilization.png", results, "utilization", "GPU utilisation", multi_seed, multi_cluster)
    plot_series(out_dir / "queue_length.png", results, "queued_jobs", "queued jobs", multi_seed, multi_cluster)


def plot_plan(path: Path, rows: list[dict[str, Any]]) -> None:
    """Bar charts comparing planner candidates: mean JCT, utilisation, cost per useful GPU-hour."""
    names = [row["candidate"] for row in rows]
    metrics = [("jct_mean", "mean JCT (s)"), ("utilization", "utilisation"),
               ("cost_per_useful_gpu_hour", "cost / useful GPU-h")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4))
    for ax, (key, title) in zip(axes, metrics):
        values = [row.get(key) or 0.0 for row in rows]
        ax.bar(range(len(names)), values, color="tab:blue")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
