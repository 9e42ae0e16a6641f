"""Speed never buys a different layout: fixed traces and placement sequences make exactly the recorded decisions.

The fixture (`data/decision_guard.json`) was recorded from the engine before the speed work of issue 21;
see `decision_guard` for the scenarios and how to regenerate it when a change of decisions is intended."""

from __future__ import annotations

import json

import pytest

from tests.placement.decision_guard import FIXTURE, first_difference, scenarios, summary

RECORDED = json.loads(FIXTURE.read_text())
SCENARIOS = scenarios()


def test_every_scenario_is_recorded():
    assert sorted(RECORDED) == sorted(s.name for s in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_decisions_match_the_recording(scenario):
    lines = scenario.run()
    expected = RECORDED[scenario.name]
    assert summary(lines)["sha256"] == expected["sha256"], first_difference(expected, lines)
