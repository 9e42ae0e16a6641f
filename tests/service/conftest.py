"""Every service built by a test here keeps its gang state machine inside the allowed transitions."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_unexpected_transition(monkeypatch, request):
    """Fail the test if any gang took a transition the state machine's table does not allow (less the test module's
    `KNOWN_UNEXPECTED` (from, to) pairs, where it names some)."""
    from scheduler.gangs import lifecycle

    machines = []
    original = lifecycle.GangStateMachine.__init__

    def tracking(self):
        original(self)
        machines.append(self)

    monkeypatch.setattr(lifecycle.GangStateMachine, "__init__", tracking)
    yield
    known = getattr(request.module, "KNOWN_UNEXPECTED", frozenset())
    others = [(key, before, after) for machine in machines for key, before, after in machine.unexpected
              if (before, after) not in known]
    assert others == [], others
