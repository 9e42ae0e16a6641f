"""`BindingPosts`: how `GangBinding` posts one member's Binding (a mixin): marked binding, fit checked again on the
worker right before the call, the outcome recorded; a failure backs off, a member that no longer fits is left for
kube-scheduler and meshfit to move.  See `scheduler.service.binding.gang_binding`."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_BINDING, Reservation
from scheduler.gangs.rendezvous import given_from_assignment
from scheduler.service.binding.binder import BindConflict, RendezvousMissing, bind_assignment

log = logging.getLogger("meshfit.bind")

RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 15.0
DRAINED_AT = 16
"""Bindings in flight at which the queue is asked to admit more gangs."""


class BusyPods:
    """The uids `in_flight_requests` counts (Bindings in flight and held members): a live view over the two tables,
    not a copy (a copy per check made every member check linear in the backlog: 27% of the lock's time at 5,000
    nodes)."""

    __slots__ = ("in_flight", "holds")

    def __init__(self, in_flight: dict, holds: dict) -> None:
        self.in_flight, self.holds = in_flight, holds

    def __contains__(self, uid: object) -> bool:
        return uid in self.in_flight or uid in self.holds



class BindingPosts:
    """Posting Bindings; mixed into `GangBinding` (it provides `state`, `binder`, `hooks`, `clock`, `fits`,
    `in_flight`, `in_flight_requests`, `posting`, `busy`, `retry_at`, `refused`, `counts`, `_pool`, `_pending_sync`,
    `let_go` and `_add_in_flight`)."""

    state: Any
    binder: Any
    hooks: Any
    clock: Callable[[], float]
    fits: Callable[..., str]
    in_flight: dict
    in_flight_requests: dict
    posting: dict
    busy: Any
    retry_at: dict
    refused: dict
    counts: dict
    _pool: Any
    _pending_sync: list
    let_go: Any
    _add_in_flight: Any

    def _start(self, record: PodRecord, entry: Reservation) -> int:
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
        self.let_go(record.uid)  # counted as a Binding in flight from now on
        self.in_flight[record.uid] = future
        self.posting[record.uid] = (slot.node, record)
        self._add_in_flight(slot.node, record, +1)
        self._submit(lambda: self._bind(record, member.gang_key, member.index, slot.node, assignment, future))
        return 1

    def _submit(self, job: Callable[[], None], pool: ThreadPoolExecutor | None = None) -> None:
        """Run `job` on `pool` (the Binding workers by default), or queue it in synchronous mode."""
        if self._pool is None:
            self._pending_sync.append(job)
            return
        try:
            (pool or self._pool).submit(job)
        except RuntimeError:  # the pools are shut down (the process is exiting): nothing more is written
            log.debug("not submitted: the binder is shutting down")

    def run_pending(self) -> None:
        """Synchronous mode (tests): run the writes `kick` queued, outside the state lock."""
        while self._pending_sync:
            jobs, self._pending_sync = list(self._pending_sync), []
            for job in jobs:
                job()

    def _still_fits(self, record: PodRecord, gang_key: str, index: int, node: str) -> str:
        """The check right before the Binding (under the lock): "" when it may be posted, else why not."""
        current = self.state.pods.get(record.uid)
        entry = self.state.ledger.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        if current is None or current.node or current.terminating:
            return "the pod is gone, bound or terminating"
        if slot is None or slot.state != SLOT_BINDING or slot.node != node or self.hooks.rolling_back(gang_key):
            return "its reservation changed"
        others = {r: v - record.needs.requests.get(r, 0) for r, v in self.in_flight_requests.get(node, {}).items()}
        return self.fits(current, node, others, self.busy)  # the check never counts `record` itself

    def _bind(self, record: PodRecord, gang_key: str, index: int, node: str, assignment: Any,
              future: Future) -> None:
        """Post one Binding (a worker thread, off the lock), after checking the fit against the latest state."""
        with self.state.lock:
            reason = self._still_fits(record, gang_key, index, node)
            if reason:
                self._no_longer_fits(record, gang_key, index, node, reason)
        if reason:
            future.set_result(reason)
            return
        error, conflict, started = "", False, time.perf_counter()
        annotations = assignment.to_annotations()
        try:
            self.binder.bind(record.namespace, record.name, record.uid, node, annotations)
        except BindConflict as exc:
            error, conflict = str(exc), True
        except Exception as exc:  # noqa: BLE001 - any failure: the slot stays held, retried later
            error = f"binding {record.namespace}/{record.name} to {node} failed: {exc}"
        self.hooks.observe(time.perf_counter() - started, not error)
        with self.state.lock:
            self._posted(record.uid)
            if error:
                self._failed(record, gang_key, index, error, conflict)
            else:
                self.counts["bound"] += 1
                self.retry_at.pop(record.uid, None)
                self.state.record_binding(record.namespace, record.name, node,
                                          given_from_assignment(assignment, record.name))
            if len(self.in_flight) == DRAINED_AT:
                self.hooks.on_drained()
        future.set_result(error)
        if not error:
            self.hooks.on_bound(gang_key)

    def _posted(self, uid: str) -> None:
        """The Binding of `uid` is no longer in flight (posted or not): stop counting it, unless that is done."""
        self.in_flight.pop(uid, None)
        self.binding_landed(uid)

    def binding_landed(self, uid: str) -> None:
        """Stop counting `uid`'s Binding in flight on its node (once: at the watch or the call's return, the first)."""
        posted = self.posting.pop(uid, None)
        if posted is not None:
            self._add_in_flight(posted[0], posted[1], -1)

    def _no_longer_fits(self, record: PodRecord, gang_key: str, index: int, node: str, reason: str) -> None:
        """Right before its Binding the member no longer fits: nothing is posted; the slot is plainly reserved again
        and the member is left to kube-scheduler, whose filters reject the node, so meshfit moves the member."""
        self._posted(record.uid)
        self.state.ledger.unmark_binding(gang_key, index)
        self.refused[record.uid] = reason
        self.counts["no_longer_fit"] += 1
        log.warning("gang %s: pod %s no longer fits node %s right before its Binding (%s); left to kube-scheduler, "
                    "which re-places it", gang_key, record.name, node, reason,
                    extra={"gang": gang_key, "decision": "no-longer-fits"})

    def _failed(self, record: PodRecord, gang_key: str, index: int, error: str, conflict: bool) -> None:
        self.state.ledger.unmark_binding(gang_key, index)
        wait = self._back_off(record, conflict)
        self.counts["conflicts" if conflict else "failed"] += 1
        log.warning("gang %s: binding pod %s failed (%s): %s", gang_key, record.name,
                    "waits for the pod to change" if conflict else f"retry in {wait:.1f} s", error,
                    extra={"gang": gang_key, "decision": "bind-failed"})

    def _back_off(self, record: PodRecord, conflict: bool) -> float:
        _, failures, _ = self.retry_at.get(record.uid, (0.0, 0, ()))
        wait = min(RETRY_FIRST_SECONDS * 2 ** failures, RETRY_MAX_SECONDS)
        self.retry_at[record.uid] = (self.clock() + wait, failures + 1, record.fingerprint if conflict else ())
        return wait

