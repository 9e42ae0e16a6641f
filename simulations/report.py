"""Write simulation outputs: `summary.json` (DESIGN contract), `details.json`, CSV series, PNG plots.

`summary.json` is `{"policies": {name: {jobs, completed, jct_mean, jct_p50, jct_p99, queue_mean,
utilization, fragmentation_mean, comm_slowdown_mean, ettr}}, "wall_seconds", "events"}`.  With several
seeds a policy's row is the mean over seeds (`runs.csv` keeps every run).  Everything except
`wall_seconds` (and the wall-clock fields of `details.json`) is a pure function of the inputs and seed.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any, Iterable

from simulations.metrics import JOB_COLUMNS, SAMPLE_COLUMNS, SUMMARY_KEYS, RunResult

INTEGER_KEYS = ("jobs", "completed")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def run_tag(result: RunResult, multi_seed: bool, multi_cluster: bool = False) -> str:
    """File-name tag of one run: policy, then cluster and seed when those vary."""
    parts = [result.policy]
    if multi_cluster:
        parts.append(result.cluster)
    if multi_seed:
        parts.append(f"seed{result.seed}")
    return _slug("-".join(parts))


def mean_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Key-wise mean of summary rows (integer keys rounded)."""
    out: dict[str, Any] = {}
    for key in SUMMARY_KEYS:
        value = sum(row[key] for row in rows) / len(rows)
        out[key] = int(round(value)) if key in INTEGER_KEYS else round(value, 6)
    return out


def summary_document(results: list[RunResult], wall_seconds: float) -> dict[str, Any]:
    """The DESIGN `summary.json` document for runs of one cluster (policies x seeds)."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_policy.setdefault(result.policy, []).append(result.summary)
    policies = {name: rows[0] if len(rows) == 1 else mean_rows(rows) for name, rows in by_policy.items()}
    return {"policies": policies, "wall_seconds": round(wall_seconds, 3), "events": sum(r.events for r in results)}


def _write_csv(path: Path, header: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(header))
        writer.writerows(rows)


def write_outputs(out_dir: Path, results: list[RunResult], wall_seconds: float,
                  meta: dict[str, Any], plots: bool = True) -> dict[str, Any]:
    """Write every output file into `out_dir`; returns the summary document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = summary_document(results, wall_seconds)
    (out_dir / "summary.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    multi_seed = len({r.seed for r in results}) > 1
    runs = []
    for result in results:
        tag = run_tag(result, multi_seed)
        _write_csv(out_dir / f"timeseries-{tag}.csv", SAMPLE_COLUMNS, result.samples)
        _write_csv(out_dir / f"jobs-{tag}.csv", JOB_COLUMNS, result.jobs)
        runs.append({"policy": result.policy, "cluster": result.cluster, "seed": result.seed,
                     "summary": result.summary, "details": result.details,
                     "wall_seconds": round(result.wall_seconds, 3),
                     "events_per_second": round(result.events / max(result.wall_seconds, 1e-9), 1)})
    _write_csv(out_dir / "runs.csv", ("policy", "cluster", "seed", *SUMMARY_KEYS),
               ([r.policy, r.cluster, r.seed, *(r.summary[k] for k in SUMMARY_KEYS)] for r in results))
    (out_dir / "details.json").write_text(json.dumps({**meta, "runs": runs}, indent=2) + "\n", encoding="utf-8")
    if plots:
        from simulations.plots import plot_runs

        plot_runs(out_dir, results, multi_seed)
    return document


def markdown_table(document: dict[str, Any]) -> str:
    """A Markdown table of a `summary.json` document (for READMEs and RESULTS.md)."""
    lines = ["| policy | " + " | ".join(SUMMARY_KEYS) + " |", "|---" * (len(SUMMARY_KEYS) + 1) + "|"]
    for name, row in document["policies"].items():
        cells = [f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in SUMMARY_KEYS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
