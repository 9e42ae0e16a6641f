"""Result tables for people: one row per metric (named as in `summary.json`), one column per policy or candidate.

Transposed so that no header is ever cut: metric names are the row labels, and each column is as wide
as its policy's name.  `METRICS` is the single list of what the table shows and what each number means
(the same definitions as `simulations.metrics` and simulations/README.md); `legend_lines` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """One row of the table: its `summary.json` key, unit and a one-line meaning."""

    key: str
    unit: str
    meaning: str


METRICS = (
    Metric("completed", "jobs", "jobs completed (of `jobs` submitted)"),
    Metric("jct_mean", "s", "mean job completion time (submit to end)"),
    Metric("jct_p50", "s", "median job completion time"),
    Metric("jct_p99", "s", "99th percentile job completion time"),
    Metric("queue_mean", "s", "mean queueing delay (submit to first start)"),
    Metric("jct_slowdown_mean", "x", "mean JCT / ideal runtime (queueing and layout stretch; 1 = no delay)"),
    Metric("comm_slowdown_mean", "x", "mean runtime stretch from the layouts' communication (1 = ideal)"),
    Metric("gpu_allocation", "share", "GPU-time held by running jobs (also reported as `utilization`); higher is not "
                                      "better by itself: stretched layouts hold GPUs longer"),
    Metric("useful_work", "share", "GPU-time doing work at ideal speed (held GPUs / runtime stretch); higher is "
                                   "better"),
    Metric("fragmentation_mean", "share", "GPUs free but on nodes too small for any waiting pod"),
    Metric("ettr", "share", "effective training time ratio: productive / held GPU-time (failures)"),
)
"""The rows of `meshfit simulate`'s table, in order."""

PLAN_METRICS = (
    Metric("gpus", "GPUs", "GPUs of the candidate"),
    Metric("gpu", "generation", "GPU generation (topology.hardware)"),
    Metric("time_to_train_hours", "h", "first submit to last completion"),
    Metric("cost_to_train", "price", "price x GPUs x time to train"),
    Metric("completed", "jobs", "jobs completed"),
    Metric("throughput_jobs_per_hour", "jobs/h", "completed jobs per hour of makespan"),
    Metric("jct_mean", "s", "mean job completion time"),
    Metric("jct_p99", "s", "99th percentile job completion time"),
    METRICS[7], METRICS[8], METRICS[6],
    Metric("cost_per_useful_gpu_hour", "price", "price x GPUs x makespan / useful GPU-hours"),
)
"""The rows of `meshfit plan`'s table, in order."""


def format_value(value: Any, unit: str) -> str:
    """A cell: seconds with thousands separators, shares and ratios to 4 significant digits, `-` for None."""
    if value is None:
        return "-"
    if isinstance(value, float) and unit == "s":
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def metric_table(columns: dict[str, dict[str, Any]], metrics: tuple[Metric, ...], title: str, corner: str) -> Any:
    """A rich table: a row per metric (`key (unit)`), a column per name in `columns` (never cut)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD)
    labels = [f"{m.key} ({m.unit})" for m in metrics]
    table.add_column(corner, no_wrap=True, min_width=max(map(len, [corner, *labels])))
    for name in columns:
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for label, metric in zip(labels, metrics):
        table.add_row(label, *(format_value(row.get(metric.key), metric.unit) for row in columns.values()))
    return table


def summary_table(document: dict[str, Any], title: str) -> Any:
    """`meshfit simulate`'s table of a `summary.json` document: metrics by policy."""
    return metric_table(document["policies"], METRICS, title, "metric (unit)")


def plan_table(rows: list[dict[str, Any]], key: str) -> Any:
    """`meshfit plan`'s table: metrics by candidate, candidates best first."""
    columns = {f"{row['rank']}. {row['candidate']}": row for row in rows}
    return metric_table(columns, PLAN_METRICS, f"candidates ranked by {key}", "metric (unit)")


def legend_lines(metrics: tuple[Metric, ...] = METRICS) -> list[str]:
    """`key: meaning` for every ratio and share shown (printed under the table; counts and seconds speak for
    themselves), then where the full definitions are."""
    lines = [f"{m.key}: {m.meaning}" for m in metrics if m.unit in ("x", "share")]
    return lines + ["definitions: simulations/README.md (summary.json keys of the same names)"]
