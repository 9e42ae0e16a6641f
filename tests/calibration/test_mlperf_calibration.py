"""The step-time model against published MLPerf Training results: predicted time-to-train ratios.

Every prediction comes from the hardware table (`topology.hardware`), the step-time model
(`scheduler.placement.steptime`) and the cost model on the generation's preset cluster
(`simulations.time_to_train`); nothing is fitted to the published numbers.  Each ratio must be within 25% of
the published one and the median error within 15%.  `python -m tests.calibration.test_mlperf_calibration`
prints the table docs/cost-model.md shows.
"""

from __future__ import annotations

import statistics

import pytest

from simulations.time_to_train import TimeToTrain, TrainingJob
from tests.calibration.mlperf_published import ROWS, PublishedRatio, Side
from topology.hardware import GENERATIONS

ROW_TOLERANCE = 0.25
MEDIAN_TOLERANCE = 0.15
TOKENS = 1e9
"""Tokens both sides of a row train on (the same benchmark: ratios do not depend on it)."""


def _minutes(side: Side, predictor: TimeToTrain) -> float:
    return predictor.minutes(TrainingJob(side.model, side.parallelism, TOKENS), GENERATIONS[side.generation])


def predicted_ratio(row: PublishedRatio, predictor: TimeToTrain | None = None) -> float:
    """Predicted slow / fast time to train (per GPU-time when the source compares per GPU)."""
    predictor = predictor or TimeToTrain()
    slow, fast = _minutes(row.slow, predictor), _minutes(row.fast, predictor)
    if row.per_gpu:
        return (slow * row.slow.gpus) / (fast * row.fast.gpus)
    return slow / fast


def relative_error(row: PublishedRatio, predictor: TimeToTrain | None = None) -> float:
    """|predicted / published - 1|."""
    return abs(predicted_ratio(row, predictor) / row.published - 1.0)


@pytest.fixture(scope="module")
def errors() -> dict[str, float]:
    return {row.name: relative_error(row) for row in ROWS}


def test_enough_published_points_across_generations():
    generations = {side.generation for row in ROWS for side in (row.slow, row.fast)}
    assert len(ROWS) >= 6 and len(generations) >= 3


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_each_ratio_within_25_percent(row, errors):
    assert errors[row.name] <= ROW_TOLERANCE, (row.name, predicted_ratio(row), row.published)


def test_median_error_within_15_percent(errors):
    assert statistics.median(errors.values()) <= MEDIAN_TOLERANCE, errors


def test_a_wrong_hardware_table_fails_the_check():
    """The check can fail: with B200 and GB200 modelled exactly as fast as an H100 (what meshfit did before),
    the cross-generation rows are far outside the tolerance."""
    from dataclasses import replace

    from scheduler.placement.steptime import StepTimeModel

    h100 = GENERATIONS["h100-sxm"]
    flat = {name: replace(h100, name=name, nvlink_domain_gpus=gen.nvlink_domain_gpus)
            for name, gen in GENERATIONS.items()}
    row = next(r for r in ROWS if r.name == "lora-b200-vs-h100-v4.1")
    slow = TimeToTrain(StepTimeModel()).minutes(TrainingJob(row.slow.model, row.slow.parallelism, TOKENS),
                                                 flat[row.slow.generation])
    fast = TimeToTrain(StepTimeModel()).minutes(TrainingJob(row.fast.model, row.fast.parallelism, TOKENS),
                                                 flat[row.fast.generation])
    assert abs((slow / fast) / row.published - 1.0) > ROW_TOLERANCE


def markdown_table() -> str:
    """The predicted-vs-published table of docs/cost-model.md."""
    lines = ["| row | benchmark | slower | faster | published | predicted | error | source |",
             "|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        predicted = predicted_ratio(row)
        side = lambda s: f"{s.gpus} x {s.generation} ({s.parallelism})"  # noqa: E731
        lines.append(f"| {row.name} | {row.benchmark} | {side(row.slow)} | {side(row.fast)} | "
                     f"{row.published:.2f}{' per GPU' if row.per_gpu else ''} | {predicted:.2f} | "
                     f"{abs(predicted / row.published - 1):.0%} | {row.source} |")
    median = statistics.median(relative_error(row) for row in ROWS)
    return "\n".join(lines) + f"\n\nMedian error: {median:.0%}."


if __name__ == "__main__":
    print(markdown_table())
