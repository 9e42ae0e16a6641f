"""`GangRepairs`: what is done to a reserved gang that cannot go on as it is: members moved off nodes that became
unusable, missing members re-held next to their bound peers, the gang released whole while nothing of it is bound,
or rolled back whole (bound members evicted) when pod 0's rendezvous is lost or it is not fully bound
`completion_timeout` seconds after its first bind.  See `scheduler.service.lifecycle.gang_lifecycle`."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable

from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import SLOT_RELEASED, SLOT_RESERVED, Reservation, reservation_key
from scheduler.gangs.queue import GangQueue
from scheduler.gangs.reserve_ops import reserve_remaining
from scheduler.placement.offered import gpus_capped, offered_only
from scheduler.service.lifecycle.actions import EVENT_WARNING
from scheduler.service.lifecycle.gang_calls import GangCalls
from scheduler.service.lifecycle.gang_notices import ReservedNotices
from scheduler.service.lifecycle.gang_phases import GangPhases, OnReserved
from scheduler.service.lifecycle.member_fit import MemberFit, gang_members

log = logging.getLogger("meshfit.gang")

INCOMPLETE_PRIORITY = 2**31
"""Queue priority of a partly bound gang waiting for room for its missing members: above any PriorityClass."""
REBUILT_GRACE_SECONDS = 10.0
"""A partly bound gang rebuilt by a new leader keeps its completion deadline (`scheduler.gangs.restart.partly_bound_for`),
but gets at least this long to bind its missing members before it is rolled back (an entry's `created_at` is its
reservation, or its rebuild)."""


class GangRepairs:
    """Repairs, releases and rollbacks of reserved gangs (call under the lock)."""

    def __init__(self, state: ClusterState, queue: GangQueue, policy: str, clock: Callable[[], float],
                 completion_timeout: float, fit: MemberFit, phases: GangPhases, calls: GangCalls,
                 notices: ReservedNotices, turned_away: dict[str, float], counters: Counter,
                 on_reserved: OnReserved) -> None:
        self.state, self.queue, self.policy, self.clock = state, queue, policy, clock
        self.completion_timeout = completion_timeout
        self.fit, self.phases, self.calls, self.notices = fit, phases, calls, notices
        self.turned_away = turned_away
        """Pod uid -> when meshfit last refused it (the lifecycle's: a released gang requeues only those members)."""
        self.counters = counters
        self.on_reserved = on_reserved
        """The lifecycle's `reserved`: members re-held or moved are a new reservation of the gang."""

    def repair(self, key: str, entry: Reservation, now: float) -> None:
        """The periodic check of one reserved, not fully bound gang: move members off unusable nodes, re-hold missing
        ones (or queue them ahead of every other gang), release it or roll it back (see the module docstring)."""
        topo = self.state.topology
        bad = [s for s in entry.slots.values() if s.state == SLOT_RESERVED
               and (s.node not in topo.node_by_name or not topo.node_by_name[s.node].schedulable)]
        if bad and not entry.has_bound():
            self.state.ledger.unreserve(key)
            self._note_unreserved(key, f"gang {key}: node(s) {', '.join(sorted({s.node for s in bad}))} became "
                                       f"unusable before any member was bound; released, placed afresh")
            return
        if bad or (entry.has_bound() and entry.missing_indices()):
            for slot in bad:
                topo.remove_pod(reservation_key(key, slot.index))
                slot.state = SLOT_RELEASED
            allowed, caps = self.fit.member_room(self.fit.pending(key), None)
            with offered_only(topo, allowed), gpus_capped(topo, caps):
                placement, reason = reserve_remaining(self.state.ledger, entry, topo, self.policy)
            if placement is not None:
                self.on_reserved(entry, None, "members moved off unusable nodes" if bad else "missing members re-held")
            elif entry.has_bound() and entry.bound_given() is not None and "pod 0" in reason:
                self.rollback(entry, reason)
                return
            elif entry.has_bound():  # heads the queue: nothing new may take GPUs its missing members need
                missing = len(entry.missing_indices())
                self.queue.note(key, INCOMPLETE_PRIORITY, missing, entry.gang.gpus_per_pod,
                                f"gang {key}: {entry.bound_count()} member(s) bound, {missing} waiting for room next to "
                                f"them; ahead of every other gang: {reason}", now)
        if entry.bound_since is not None and now - entry.bound_since > self.completion_timeout \
                and now - entry.created_at > REBUILT_GRACE_SECONDS:
            self.rollback(entry, f"gang {key} is not fully bound {self.completion_timeout:.0f} s after its "
                                 f"first member ({entry.bound_count()} of {len(entry.gang.pods)} bound)")

    def release(self, key: str, message: str) -> None:
        """Release a gang's reservation whole (nothing of it bound): one gang Event, back in meshfit's queue (placed
        afresh by the next admission pass), and only members kube-scheduler parked are requeued."""
        entry = self.state.ledger.get(key)
        self.state.ledger.unreserve(key)
        self.notices.flush(key)
        log.warning(message, extra={"gang": key, "decision": "released"})
        members = gang_members(self.state, key)
        self.calls.tell_gang(members, "GangReleased", message)
        if entry is not None and members:
            self.queue.note(key, max(r.priority for r in members), len(entry.gang.pods), entry.gang.gpus_per_pod,
                            message, self.clock())
        for record in members:
            if not record.node and record.uid in self.turned_away:
                self.calls.requeue(record, None)
        self.phases.observe(key)

    def _note_unreserved(self, key: str, message: str) -> None:
        self.notices.flush(key)
        log.warning(message, extra={"gang": key, "decision": "released"})
        for record in gang_members(self.state, key):
            self.calls.event(record, "GangReleased", message, EVENT_WARNING)
            if not record.node:
                self.calls.requeue(record, None)

    def rollback(self, entry: Reservation, reason: str) -> None:
        """Roll the gang back whole: evict its bound members, release every slot, place it afresh later."""
        key = entry.gang_key
        self.phases.observe(key)  # the phase it is leaving (a gang rebuilt by a re-list may not be recorded yet)
        message = f"gang {key} rolled back: {reason}; its bound members are evicted and the gang placed afresh"
        self.notices.flush(key)
        log.warning(message, extra={"gang": key, "decision": "rolled-back"})
        self.counters["rollbacks"] += 1
        evicted = set()
        for record in gang_members(self.state, key):
            self.calls.event(record, "GangRolledBack", message, EVENT_WARNING)
            if record.node:
                evicted.add(record.uid)
                self.calls.evict(record, message)
        self.state.ledger.unreserve(key)
        if evicted:
            self.phases.rolling_back[key] = evicted
        self.phases.observe(key)

    def evicted_whole(self, key: str, uids: set[str]) -> None:
        """Every bound member of the gang is being deleted by someone else (kube-scheduler's preemption, a user):
        hold nothing for it -- the room goes to whoever evicted it -- and place it afresh once they are gone."""
        if key in self.phases.rolling_back:
            return
        self.phases.observe(key)
        entry = self.state.ledger.get(key)
        if entry is not None:
            self.state.ledger.unreserve(key)
        self.phases.rolling_back[key] = set(uids)
        log.warning("gang %s: all its bound members are being deleted (preempted or removed); it holds nothing and "
                    "is placed afresh once they are gone", key, extra={"gang": key, "decision": "evicted"})
        self.phases.observe(key)
