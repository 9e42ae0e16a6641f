"""Issue 22 item 3: simulator metrics named for what they measure, the same quantity in table and plot, whole
headers, every summary key defined in simulations/README.md; `utilization` kept as an alias of GPU allocation."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from simulations import plots
from simulations.metrics import SUMMARY_KEYS

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
POLICIES = ("meshfit", "kueue-tas", "volcano-hypernode", "first-fit")
ARGS = ["simulate", "--preset", "gb200-nvl72", "--nodes", "36", "--synthetic", "300", "--seed", "0",
        *(arg for policy in POLICIES for arg in ("--policy", policy))]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The GB200 case of the issue, small: first-fit holds more GPUs but finishes jobs later."""
    out = tmp_path_factory.mktemp("sim")
    result = RUNNER.invoke(app, [*ARGS, "--out-dir", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["policies"], out


def test_gpu_allocation_is_not_mistaken_for_useful_work(run):
    policies, _ = run
    meshfit, first_fit = policies["meshfit"], policies["first-fit"]
    assert first_fit["gpu_allocation"] > meshfit["gpu_allocation"], "first-fit holds GPUs longer..."
    assert first_fit["jct_mean"] > meshfit["jct_mean"], "...while its jobs finish later"
    assert first_fit["useful_work"] < meshfit["useful_work"], "useful work ranks them as JCT does"
    assert first_fit["jct_slowdown_mean"] > meshfit["jct_slowdown_mean"]
    for row in policies.values():
        assert row["utilization"] == row["gpu_allocation"], "the DESIGN key stays, as an alias"
        assert 0 < row["useful_work"] <= row["gpu_allocation"] + 1e-9 and row["jct_slowdown_mean"] >= 1


def test_plots_show_the_table_quantities_under_their_names(run, monkeypatch):
    _, out = run
    assert (out / "gpu_allocation.png").stat().st_size and (out / "useful_work.png").stat().st_size
    assert not (out / "utilization.png").exists(), "no plot named for a quantity it does not show"
    with (out / "timeseries-first-fit.csv").open() as handle:
        series = list(csv.DictReader(handle))
    assert {"gpu_allocation", "useful_work"} <= set(series[0])
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.setdefault(path.name, fig))
    from simulations.metrics import SAMPLE_COLUMNS
    from tests.simulations.sim_builders import make_workload, simulate

    result = simulate(make_workload(), "first-fit")[1]
    plots.plot_runs(out, [result], multi_seed=False)
    for key in ("gpu_allocation", "useful_work"):
        axes = drawn[f"{key}.png"].axes[0]
        assert axes.get_title().startswith(f"{key}:")
        expected = [row[SAMPLE_COLUMNS.index(key)] for row in result.samples]
        assert list(axes.get_lines()[0].get_ydata()) == expected


def test_table_headers_and_metric_names_are_whole_in_a_pipe():
    from simulations.tables import METRICS

    result = RUNNER.invoke(app, [*ARGS[:5], "--synthetic", "60", "--policy", "volcano-hypernode",
                                 "--policy", "first-fit"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for name in ("volcano-hypernode", "first-fit", *(m.key for m in METRICS)):
        assert name in result.stdout, name
    assert "gpu_allocation: GPU-time held by running jobs" in " ".join(result.stdout.split())


def test_every_summary_key_is_defined_in_the_simulations_readme():
    text = (ROOT / "simulations" / "README.md").read_text()
    defined = set(re.findall(r"^\| `([a-z0-9_]+)` \|", text, re.M))
    assert set(SUMMARY_KEYS) <= defined, set(SUMMARY_KEYS) - defined
    assert "alias" in text and "gpu_allocation.png" in text and "useful_work.png" in text
