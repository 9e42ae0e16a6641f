"""`BindingPoster`: how the direct binder posts one member's Binding -- claimed `binding` on its node, fit checked again
on the worker right before the call, the outcome recorded; a failure backs off, a member that no longer fits is left
for kube-scheduler and meshfit to move.  See `scheduler.service.binding.gang_binding`."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.room_ledger import ClaimState
from scheduler.gangs.ledger import SLOT_BINDING, Reservation
from scheduler.gangs.rendezvous import given_from_assignment
from scheduler.service.binding.binder import BindConflict, Binder, RendezvousMissing, bind_assignment
from scheduler.service.binding.binding_wiring import BindingHooks, RoomCheck
from scheduler.service.binding.member_holds import MemberHolds
from scheduler.service.binding.member_vacancies import MemberVacancies
from scheduler.service.binding.retries import BindRetries
from scheduler.service.binding.workers import BindingWorkers

log = logging.getLogger("meshfit.bind")

DRAINED_AT = 16
"""Bindings in flight at which the queue is asked to admit more gangs."""


class BindingPoster:
    """Posts members' Bindings on the Binding workers; `in_flight` holds each call's outcome."""

    def __init__(self, state: Any, binder: Binder, fit: RoomCheck, holds: MemberHolds, workers: BindingWorkers,
                 retries: BindRetries, hooks: BindingHooks, counts: dict[str, int], vacancies: MemberVacancies) -> None:
        self.state, self.binder, self.fit, self.holds, self.workers = state, binder, fit, holds, workers
        self.retries, self.hooks, self.counts, self.vacancies = retries, hooks, counts, vacancies
        self.in_flight: dict[str, Future] = {}
        """Pod uid -> the outcome ("" or an error text) of the Binding posted for it."""

    def start(self, record: PodRecord, entry: Reservation) -> int:
        """Claim `record` `binding` on its slot's node and post its Binding on a worker; 1 when started, else 0."""
        member = record.member
        slot = entry.slots[member.index]
        try:
            assignment = bind_assignment(entry, member.index)
        except RendezvousMissing:
            return 0
        if not self.state.ledger.mark_binding(member.gang_key, member.index, record.name,
                                              given_from_assignment(assignment, record.name)):
            return 0
        future: Future = Future()
        if record.nominated != slot.node:
            self.counts["unnominated"] += 1  # bound without a nomination first (`GangBinding._unraced`)
        self.holds.let_go(record.uid)
        self.state.room.hold(record, slot.node, ClaimState.BINDING)  # counted as a Binding in flight from now on
        self.in_flight[record.uid] = future
        self.workers.bind(lambda: self._bind(record, member.gang_key, member.index, slot.node, assignment, future))
        return 1

    def _still_fits(self, record: PodRecord, gang_key: str, index: int, node: str) -> str:
        """The check right before the Binding (under the lock): "" when it may be posted, else why not."""
        current = self.state.pods.get(record.uid)
        entry = self.state.ledger.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        if current is None or current.node or current.terminating:
            return "the pod is gone, bound or terminating"
        if slot is None or slot.state != SLOT_BINDING or slot.node != node or self.hooks.rolling_back(gang_key):
            return "its reservation changed"
        return self.fit.fits(current, node)  # its own `binding` claim is never counted against it

    def _bind(self, record: PodRecord, gang_key: str, index: int, node: str, assignment: Any,
              future: Future) -> None:
        """Post one Binding (a worker thread, off the lock), after checking the fit against the latest state."""
        with self.state.lock:
            reason = self._still_fits(record, gang_key, index, node)
            if reason:
                self._no_longer_fits(record, gang_key, index, node, reason)
                self.hooks.slots_changed(gang_key)
        if reason:
            future.set_result(reason)
            return
        error, conflict, started = "", False, time.perf_counter()
        try:
            self.binder.bind(record.namespace, record.name, record.uid, node, assignment.to_annotations())
        except BindConflict as exc:
            error, conflict = str(exc), True
        except Exception as exc:  # noqa: BLE001 - any failure: the slot stays held, retried later
            error = f"binding {record.namespace}/{record.name} to {node} failed: {exc}"
        self.hooks.observe(time.perf_counter() - started, not error)
        with self.state.lock:
            self.in_flight.pop(record.uid, None)
            if error:
                self._failed(record, gang_key, index, error, conflict)
            else:
                self.counts["bound"] += 1
                self.retries.succeeded(record.uid)
                self.state.record_binding(record.namespace, record.name, node,
                                          given_from_assignment(assignment, record.name))
            self.hooks.slots_changed(gang_key)
            if len(self.in_flight) == DRAINED_AT:
                self.hooks.on_drained()
        future.set_result(error)
        if not error:
            self.hooks.on_bound(gang_key)

    def _released(self, gang_key: str) -> None:
        """A Binding of `gang_key` was refused or failed, its slot plainly reserved again: the gang may have nothing
        bound or binding any more, so its vacancies are counted afresh (`MemberVacancies.refresh`)."""
        self.vacancies.refresh(gang_key)

    def _unclaim(self, uid: str) -> None:
        """The Binding of `uid` was not posted or failed: its `binding` claim follows the pod's own facts again."""
        self.in_flight.pop(uid, None)
        self.state.room.let_go(uid, self.state.pods.get(uid), (ClaimState.BINDING,))

    def _no_longer_fits(self, record: PodRecord, gang_key: str, index: int, node: str, reason: str) -> None:
        """Right before its Binding the member no longer fits: nothing is posted; the slot is plainly reserved again
        and the member is left to kube-scheduler, whose filters reject the node, so meshfit moves the member."""
        self._unclaim(record.uid)
        self.state.ledger.unmark_binding(gang_key, index)
        self._released(gang_key)
        self.retries.refused[record.uid] = reason
        self.counts["no_longer_fit"] += 1
        log.warning("gang %s: pod %s no longer fits node %s right before its Binding (%s); left to kube-scheduler, "
                    "which re-places it", gang_key, record.name, node, reason,
                    extra={"gang": gang_key, "decision": "no-longer-fits"})

    def _failed(self, record: PodRecord, gang_key: str, index: int, error: str, conflict: bool) -> None:
        self._unclaim(record.uid)
        self.state.ledger.unmark_binding(gang_key, index)
        self._released(gang_key)
        wait = self.retries.back_off(record, conflict)
        self.counts["conflicts" if conflict else "failed"] += 1
        log.warning("gang %s: binding pod %s failed (%s): %s", gang_key, record.name,
                    "waits for the pod to change" if conflict else f"retry in {wait:.1f} s", error,
                    extra={"gang": gang_key, "decision": "bind-failed"})

    def wait_for(self, uid: str, timeout: float) -> str | None:
        """The outcome of the Binding of pod `uid` ("" bound, else the error); None when none is in flight."""
        future = self.in_flight.get(uid)
        if future is None:
            return None
        try:
            return future.result(timeout)
        except Exception as exc:  # noqa: BLE001 - timeout: report, kube-scheduler retries
            return f"meshfit's own binding of this pod did not finish in {timeout:.0f} s: {exc!r}"


