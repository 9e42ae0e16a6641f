"""Every service built by a test here keeps its gang state machine inside the allowed transitions."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_unexpected_transition(monkeypatch):
    """Fail the test if any gang took a transition the state machine's table does not allow."""
    from scheduler.gangs import lifecycle

    machines = []
    original = lifecycle.GangStateMachine.__init__

    def tracking(self):
        original(self)
        machines.append(self)

    monkeypatch.setattr(lifecycle.GangStateMachine, "__init__", tracking)
    yield
    unexpected = [change for machine in machines for change in machine.unexpected]
    assert unexpected == [], unexpected
