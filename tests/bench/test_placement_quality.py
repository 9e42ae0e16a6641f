"""Reduced placement quality study: meshfit within 5% of optimal on >= 95% of small instances, and no worse
than the Kueue / Volcano baselines on a preset (full study: `python tests/bench/placement_quality.py`)."""

from __future__ import annotations

import pytest

from tests.bench.placement_quality import optimal_study, preset_study


def test_meshfit_is_within_5_percent_of_optimal_on_95_percent_of_small_instances():
    summary = optimal_study(60, seed=1)
    assert summary["instances"] >= 50
    assert summary["within_5pct"] >= 0.95, summary


@pytest.mark.slow
def test_meshfit_beats_or_ties_the_baselines_on_gb200_3d_jobs():
    rows = preset_study(2, presets=("gb200-nvl72",))
    for row in rows:
        for baseline in ("kueue-tas", "volcano-hypernode"):
            assert row[baseline]["n"] > 0 and row[baseline]["median"] <= 1.0 + 1e-9, row
