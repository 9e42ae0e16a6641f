"""`GangPhases`: every gang's phase, observed into the gang state machine (`scheduler.gangs.lifecycle`, whose
listeners run for each transition taken), and the rollbacks still in progress -- gangs whose evicted members are not
gone yet, which keeps them from being placed again."""

from __future__ import annotations

from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import Reservation
from scheduler.gangs.lifecycle import GangStateMachine, phase_of
from scheduler.gangs.queue import GangQueue
from scheduler.service.lifecycle.member_fit import gang_members

OnReserved = Callable[[Reservation, PodRecord | None, str], None]
"""Called when a gang was (re)reserved: (its entry, the member that asked or None, how, in words)."""


class GangPhases:
    """Gang phases and the gangs rolling back (call under the lock)."""

    def __init__(self, state: ClusterState, queue: GangQueue, machine: GangStateMachine,
                 rolling_back: dict[str, set[str]]) -> None:
        self.state, self.queue, self.machine = state, queue, machine
        self.rolling_back = rolling_back
        """Gang key -> uids of evicted members still present; the gang is not placed until they are gone."""

    def observe(self, key: str) -> str | None:
        """Record the gang's phase in the state machine (its listeners run for the transition taken)."""
        phase = phase_of(self.state.ledger.get(key), key in self.rolling_back, key in self.queue.entries)
        return self.machine.observe(key, phase)

    def observe_all(self) -> None:
        """`observe` every gang the ledger, the queue, a rollback or the machine knows (the periodic pass)."""
        keys = set(self.state.ledger.entries) | set(self.queue.entries) | set(self.rolling_back) | set(
            self.machine.phases)
        for key in sorted(keys):
            self.observe(key)

    def is_rolling_back(self, key: str) -> bool:
        """True while evicted members of the gang's rollback are still present (they keep it from being re-placed)."""
        evicted = self.rolling_back.get(key)
        if evicted is None:
            return False
        evicted &= {r.uid for r in gang_members(self.state, key)}
        if not evicted:
            del self.rolling_back[key]
            return False
        return True

    def forget_gone(self) -> None:
        """Drop evicted members that are gone from the rollbacks, and rollbacks with none left."""
        for key in list(self.rolling_back):
            present = {r.uid for r in gang_members(self.state, key)}
            self.rolling_back[key] &= present
            if not self.rolling_back[key]:
                del self.rolling_back[key]
