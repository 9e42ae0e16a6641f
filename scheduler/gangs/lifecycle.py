"""The life of a gang as one explicit state machine: its phases, the named transitions between them, listeners.

    (gone) --queued--> waiting --reserved--> reserved --binding--> binding --bound--> bound --finished--> (gone)
                          ^                     |                     |                 |
                          +------released-------+                     +--member-lost----+--> repairing --repaired--+
                                                                                                      |            |
     any phase with a member bound or binding --rolled-back--> rolling-back --re-placed--> waiting / reserved <----+

A gang's phase is *derived* from the ledger entry, the queue and the rollbacks in flight (`phase_of`), so the
machine can never disagree with the state decisions are made on; `GangStateMachine.observe` is called after
every decision (and by the periodic pass), turns a phase change into its named transition, and calls the
listeners attached to it.  A change the table does not allow is recorded as `unexpected` (logged and counted:
a bug, never silently accepted).  What attaches where (`scheduler.service.lifecycle.gang_lifecycle` wires it):

- `reserved`, `repaired`: the direct binder starts the members' Bindings (`scheduler.service.binding.gang_binding`);
- `bound`: the "all pods bound" milestone (log, Event) and the rank table;
- `rolled-back`: Events on the members; `member-lost`: replacement and spares take over;
- every transition is counted in `meshfit_gang_transitions_total{transition}`.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from enum import Enum
from typing import Any, Callable

log = logging.getLogger("meshfit.gang")


class Phase(str, Enum):
    """Where a gang is in its life."""

    GONE = "gone"
    WAITING = "waiting"
    RESERVED = "reserved"
    BINDING = "binding"
    BOUND = "bound"
    REPAIRING = "repairing"
    ROLLING_BACK = "rolling-back"


P = Phase
TRANSITIONS: dict[tuple[Phase, Phase], str] = {
    (P.GONE, P.WAITING): "queued", (P.GONE, P.RESERVED): "reserved", (P.WAITING, P.RESERVED): "reserved",
    (P.RESERVED, P.BINDING): "binding", (P.RESERVED, P.BOUND): "bound", (P.BINDING, P.BOUND): "bound",
    (P.RESERVED, P.REPAIRING): "binding",  # a slot was released while nothing was bound, then a member bound
    (P.GONE, P.BINDING): "restored", (P.GONE, P.BOUND): "restored", (P.GONE, P.REPAIRING): "restored",
    (P.RESERVED, P.WAITING): "released", (P.RESERVED, P.GONE): "released", (P.WAITING, P.GONE): "withdrawn",
    (P.BINDING, P.RESERVED): "released", (P.BINDING, P.REPAIRING): "member-lost", (P.BOUND, P.REPAIRING): "member-lost",
    (P.BOUND, P.BINDING): "member-lost", (P.BOUND, P.RESERVED): "member-lost",
    (P.REPAIRING, P.BINDING): "repaired", (P.REPAIRING, P.BOUND): "repaired",
    (P.REPAIRING, P.RESERVED): "repaired",
    (P.ROLLING_BACK, P.GONE): "re-placed", (P.ROLLING_BACK, P.WAITING): "re-placed",
    (P.ROLLING_BACK, P.RESERVED): "re-placed",
    (P.BOUND, P.GONE): "finished", (P.BINDING, P.GONE): "finished", (P.REPAIRING, P.GONE): "finished",
    (P.REPAIRING, P.WAITING): "finished", (P.BOUND, P.WAITING): "finished",
}
"""(from, to) -> the transition's name.  Rolling back is allowed from every phase but gone and waiting."""
for _phase in (P.RESERVED, P.BINDING, P.BOUND, P.REPAIRING):
    TRANSITIONS[(_phase, P.ROLLING_BACK)] = "rolled-back"

Listener = Callable[[str, Phase, Phase], Any]
"""`listener(gang key, from phase, to phase)`."""


def phase_of(entry: Any, rolling_back: bool, waiting: bool) -> Phase:
    """The phase of a gang from its ledger entry (or None), whether a rollback is in flight, whether it is queued."""
    if rolling_back:
        return P.ROLLING_BACK
    if entry is None:
        return P.WAITING if waiting else P.GONE
    if entry.status == "bound":
        return P.BOUND
    if entry.has_bound():
        return P.REPAIRING if entry.missing_indices() else P.BINDING
    return P.RESERVED


class GangStateMachine:
    """The phase of every live gang, its transitions and their listeners; see the module docstring."""

    def __init__(self) -> None:
        self.phases: dict[str, Phase] = {}
        self.listeners: dict[str, list[Listener]] = defaultdict(list)
        self.counts: Counter = Counter()
        """Transition name -> how many times it happened."""
        self.unexpected: list[tuple[str, Phase, Phase]] = []
        """Changes the table does not allow (the last 100): bugs, kept for tests and logs."""

    def on(self, transition: str, listener: Listener) -> None:
        """Call `listener` whenever a gang takes `transition` (a name of `TRANSITIONS`, or `unexpected`)."""
        if transition not in set(TRANSITIONS.values()) | {"unexpected"}:
            raise ValueError(f"no transition named {transition!r}")
        self.listeners[transition].append(listener)

    def phase(self, key: str) -> Phase:
        """The gang's last observed phase (gone when never seen)."""
        return self.phases.get(key, P.GONE)

    def observe(self, key: str, phase: Phase) -> str | None:
        """Record the gang's phase now; returns the transition taken (None when the phase did not change)."""
        before = self.phase(key)
        if before == phase:
            return None
        name = TRANSITIONS.get((before, phase), "unexpected")
        if name == "unexpected":
            self.unexpected = [*self.unexpected[-99:], (key, before, phase)]
            log.error("gang %s went from %s to %s, which its state machine does not allow", key, before.value,
                      phase.value, extra={"gang": key, "decision": "unexpected-transition"})
        if phase == P.GONE:
            self.phases.pop(key, None)
        else:
            self.phases[key] = phase
        self.counts[name] += 1
        for listener in self.listeners.get(name, ()):
            listener(key, before, phase)
        return name
