"""Simulation plots people can read: distinct overlapping series, titles and units everywhere, GPU allocation
and useful work (GPUs / runtime stretch) plotted apart, so a slower policy does not look better for being busier."""

from __future__ import annotations

from itertools import islice

import pytest

from simulations import plots
from simulations.metrics import SAMPLE_COLUMNS
from simulations.synthetic import generate
from tests.simulations.sim_builders import make_workload, simulate


@pytest.fixture(scope="module")
def stretched_run():
    """A GB200 run of tp=16 jobs on 4-GPU trays: layouts stretch runtimes, so ideal < held utilisation."""
    workload = generate(40, 144, seed=3, load=0.9, max_tp=16)
    return simulate(workload, "first-fit", nodes=36, preset="gb200-nvl72")[1]


@pytest.fixture
def figures(monkeypatch):
    """Every figure a plot function saves, instead of writing it."""
    saved = []

    def keep(fig, path):
        saved.append((fig, path))

    monkeypatch.setattr(plots, "_save", keep)
    return saved


def test_series_styles_differ_in_marker_and_line_style():
    styles = list(islice(plots.series_styles(), 4))
    assert len({(s["marker"], s["linestyle"]) for s in styles}) == 4
    assert len({s["color"] for s in styles}) == 4
    assert [s["linewidth"] for s in styles] == sorted((s["linewidth"] for s in styles), reverse=True)


def test_every_plot_has_a_title_and_axis_units(tmp_path, figures):
    _, result = simulate(make_workload(), "first-fit")
    twin = simulate(make_workload(), "kueue-tas")[1]
    plots.plot_runs(tmp_path, [result, twin], multi_seed=False)
    plots.plot_plan(tmp_path / "plan.png", [{"candidate": "a", "gpu": "h100-sxm", "time_to_train_hours": 2.0,
                                             "cost_to_train": 40.0, "jct_mean": 10.0, "useful_work": 0.5}])
    assert [path.name for _, path in figures] == ["jct_cdf.png", "gpu_allocation.png", "useful_work.png",
                                                  "queue_length.png", "plan.png"]
    for fig, path in figures:
        for ax in fig.axes:
            assert ax.get_title() and ax.get_ylabel(), path.name
    assert "(s" in figures[0][0].axes[0].get_xlabel()
    assert all(fig.axes[0].get_xlabel() == "simulated time (h)" for fig, _ in figures[1:4])
    assert [ax.get_ylabel() for ax in figures[4][0].axes] == ["hours", "price units", "seconds", "share 0-1"]
    assert figures[1][0].axes[0].get_title().startswith("gpu_allocation:")
    useful_axes = figures[2][0].axes[0]
    assert useful_axes.get_title().startswith("useful_work:")
    lines = useful_axes.get_lines()
    assert len(lines) == 2 and lines[0].get_marker() != lines[1].get_marker()
    assert lines[0].get_linestyle() != lines[1].get_linestyle()


def test_useful_work_never_exceeds_gpu_allocation(stretched_run):
    held, useful = SAMPLE_COLUMNS.index("gpu_allocation"), SAMPLE_COLUMNS.index("useful_work")
    assert all(row[useful] <= row[held] + 1e-6 for row in stretched_run.samples)
    assert 0 < stretched_run.summary["useful_work"] < stretched_run.summary["gpu_allocation"]
    assert stretched_run.summary["useful_work"] == stretched_run.details["ideal_utilization"]


def test_useful_work_equals_gpu_allocation_without_stretch():
    single_gpu_jobs = make_workload([(10.0 * i, 300.0, 1) for i in range(12)])  # no communication, no stretch
    _, result = simulate(single_gpu_jobs, "first-fit")
    assert result.summary["gpu_allocation"] == result.summary["utilization"] > 0
    assert result.summary["useful_work"] == pytest.approx(result.summary["gpu_allocation"], abs=1e-6)
