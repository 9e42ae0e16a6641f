"""`GangBinding`: once a gang is reserved, meshfit binds its members itself, in parallel, one write per pod.

Why (docs/architecture.md, "Binding path"): a reserved gang's members otherwise trickle through
kube-scheduler's single queue one by one, interleaved with every other pod, and meshfit had to requeue
the members kube-scheduler parked (two writes each).  meshfit already owns the reservation and already
posts the Bindings that carry the rank assignment, so it posts them all as soon as the gang is reserved.

A member is bound here only when it is safe on its node without kube-scheduler's own filters:

- it is a pending pod the API server reported (never a request body), of meshfit's scheduler profile, not
  terminating, its gang consistent, its slot plainly reserved on a schedulable node, pod 0's node held
  (the rendezvous every Binding carries is never empty), and the gang is not being rolled back;
- `fits(record, node, extra)` (`scheduler.kube.node_fit`) accepts it: cordon, taints, node selector and
  required node affinity, every requested resource against what bound pods and this binder's in-flight
  Bindings already take; pods whose fit depends on other objects (inter-pod affinity, spread constraints,
  volumes claims, host ports, resource claims) are left to kube-scheduler;
- kube-scheduler is not handling it right now (a member it filtered in the last `KUBE_GRACE_SECONDS` is
  left to its own `/bind`, so the two never race on one pod).

A Binding in flight marks the slot `binding` (nothing may move or free it, pod 0 included).  A failed one
puts the slot back to reserved and is retried with backoff; a conflict (the pod is gone, or bound elsewhere)
waits for the pod to change.  kube-scheduler's own `/bind` of a member this binder is binding waits for that
Binding's outcome (`wait_for`), so both answers agree.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_RESERVED, Reservation
from scheduler.gangs.rendezvous import given_from_annotations
from scheduler.service.binding import BindConflict, Binder, RendezvousMissing, bind_annotations

log = logging.getLogger("meshfit.bind")

KUBE_GRACE_SECONDS = 5.0
"""A member kube-scheduler filtered onto its node is left to kube-scheduler's `/bind` this long."""
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 15.0
DEFAULT_WORKERS = 16
DRAINED_AT = 16
"""Bindings in flight at which the queue is asked to admit more gangs."""


class GangBinding:
    """Binds the reserved members of gangs directly; see the module docstring."""

    def __init__(self, state: Any, binder: Binder, fits: Callable[[PodRecord, str, dict], str],
                 on_bound: Callable[[str], None], clock: Callable[[], float],
                 scheduler_names: Callable[[], frozenset[str]], workers: int = DEFAULT_WORKERS,
                 synchronous: bool = False) -> None:
        self.state, self.binder, self.fits, self.on_bound, self.clock = state, binder, fits, on_bound, clock
        self.scheduler_names = scheduler_names
        self.synchronous = synchronous
        self._pool = None if synchronous else ThreadPoolExecutor(workers, thread_name_prefix="meshfit-bind")
        self.in_flight: dict[str, Future] = {}
        """Pod uid -> the outcome ("" or an error text) of the Binding this binder is posting for it."""
        self.in_flight_requests: dict[str, dict[str, Any]] = {}
        """Node -> requests of this binder's Bindings in flight there (not yet in `state.requested`)."""
        self.kube_handling: dict[str, float] = {}
        """Pod uid -> when kube-scheduler was last told this member's node (it is binding it itself)."""
        self.retry_at: dict[str, tuple[float, int, tuple]] = {}
        """Pod uid -> (not before, failures so far, pod fingerprint at the last failure)."""
        self.refused: dict[str, str] = {}
        """Pod uid -> why it is left to kube-scheduler (logged once per reason)."""
        self.rolling_back: Callable[[str], bool] = lambda key: False
        """Whether a gang is being rolled back (no member of it may bind)."""
        self.counts = {"bound": 0, "failed": 0, "conflicts": 0}
        self._pending_sync: list[tuple] = []
        self.on_drained: Callable[[], None] = lambda: None
        """Called under the state lock when the Bindings in flight fall to `DRAINED_AT` (the queue may admit more)."""
        self.observe: Callable[[float, bool], None] = lambda seconds, ok: None
        """Called with (seconds, succeeded) after each Binding call."""

    # ----- decisions (under the state lock) ------------------------------------------------------------------
    def kick(self, gang_key: str) -> int:
        """Start Bindings for every member of `gang_key` that may be bound now; returns how many started."""
        entry = self.state.ledger.get(gang_key)
        if entry is None or self.rolling_back(gang_key) or entry.node_of(0) is None:
            return 0
        started = 0
        for record in list(self.state.gang_index.get(gang_key, {}).values()):
            if self._may_bind(record, entry):
                started += self._start(record, entry)
        return started

    def kick_all(self) -> int:
        """`kick` every gang with a plainly reserved slot (the periodic pass: retries, late pods)."""
        keys = [key for key, entry in self.state.ledger.entries.items()
                if any(s.state == SLOT_RESERVED for s in entry.slots.values())]
        return sum(self.kick(key) for key in keys)

    def note_kube_handling(self, record: PodRecord) -> None:
        """kube-scheduler was just told this member's node: it binds it through `/bind` itself."""
        self.kube_handling[record.uid] = self.clock()

    def leaves_to_kube(self, record: PodRecord) -> bool:
        """True when this binder will not bind `record` (kube-scheduler must; requeue it if it may be parked)."""
        needs = record.needs
        return needs is None or bool(getattr(needs, "direct_bind_blocker", "")) or record.uid in self.refused

    def _may_bind(self, record: PodRecord, entry: Reservation) -> bool:
        member = record.member
        if (record.node or record.terminating or not record.from_watch or record.member_error or member is None
                or record.needs is None or record.uid in self.in_flight):
            return False
        slot = entry.slots.get(member.index)
        if slot is None or slot.state != SLOT_RESERVED or slot.pod not in (None, record.name):
            return False
        now = self.clock()
        if now - self.kube_handling.get(record.uid, -1e18) < KUBE_GRACE_SECONDS:
            return False
        retry = self.retry_at.get(record.uid)
        if retry is not None and (now < retry[0] or (retry[2] and retry[2] == record.fingerprint)):
            return False
        reason = self._refusal(record, entry, slot.node)
        if reason:
            if self.refused.get(record.uid) != reason:
                self.refused[record.uid] = reason
                log.info("gang %s: pod %s is left to kube-scheduler: %s", member.gang_key, record.name, reason,
                         extra={"gang": member.gang_key, "decision": "left-to-kube-scheduler"})
            return False
        self.refused.pop(record.uid, None)
        return True

    def _refusal(self, record: PodRecord, entry: Reservation, node: str) -> str:
        blocker = getattr(record.needs, "direct_bind_blocker", "")
        if blocker:
            return blocker
        if record.scheduler_name not in self.scheduler_names():
            return f"its schedulerName {record.scheduler_name!r} is not meshfit's profile"
        if entry.signature is not None and record.signature() != entry.signature:
            return "it disagrees with the gang's reservation"
        topo_node = self.state.topology.node_by_name.get(node)
        if topo_node is None or not topo_node.schedulable:
            return f"node {node} is not schedulable"
        return self.fits(record, node, self.in_flight_requests.get(node, {}))

    def _start(self, record: PodRecord, entry: Reservation) -> int:
        member = record.member
        slot = entry.slots[member.index]
        try:
            annotations = bind_annotations(entry, member.index)
        except RendezvousMissing:
            return 0
        if not self.state.ledger.mark_binding(member.gang_key, member.index, record.name,
                                              given_from_annotations(annotations, record.name)):
            return 0
        future: Future = Future()
        self.in_flight[record.uid] = future
        self._add_in_flight(slot.node, record, +1)
        job = (record, member.gang_key, member.index, slot.node, annotations, future)
        if self._pool is None:
            self._pending_sync.append(job)
        else:
            self._pool.submit(self._bind, *job)
        return 1

    def run_pending(self) -> None:
        """Synchronous mode (tests): post the Bindings `kick` queued, outside the state lock."""
        jobs, self._pending_sync = list(self._pending_sync), []
        for job in jobs:
            self._bind(*job)

    def _add_in_flight(self, node: str, record: PodRecord, sign: int) -> None:
        used = self.in_flight_requests.setdefault(node, {})
        for resource, value in record.needs.requests.items():
            used[resource] = used.get(resource, 0) + sign * value
        if all(not v for v in used.values()):
            self.in_flight_requests.pop(node, None)

    # ----- the Binding (a worker thread, off the lock) ---------------------------------------------------------
    def _bind(self, record: PodRecord, gang_key: str, index: int, node: str, annotations: dict,
              future: Future) -> None:
        error, conflict, started = "", False, time.perf_counter()
        try:
            self.binder.bind(record.namespace, record.name, record.uid, node, annotations)
        except BindConflict as exc:
            error, conflict = str(exc), True
        except Exception as exc:  # noqa: BLE001 - any failure: the slot stays held, retried later
            error = f"binding {record.namespace}/{record.name} to {node} failed: {exc}"
        self.observe(time.perf_counter() - started, not error)
        with self.state.lock:
            self._add_in_flight(node, record, -1)
            self.in_flight.pop(record.uid, None)
            if error:
                self._failed(record, gang_key, index, error, conflict)
            else:
                self.counts["bound"] += 1
                self.retry_at.pop(record.uid, None)
                self.state.record_binding(record.namespace, record.name, node, annotations)
            if len(self.in_flight) == DRAINED_AT:
                self.on_drained()
        future.set_result(error)
        if not error:
            self.on_bound(gang_key)

    def _failed(self, record: PodRecord, gang_key: str, index: int, error: str, conflict: bool) -> None:
        self.state.ledger.unmark_binding(gang_key, index)
        _, failures, _ = self.retry_at.get(record.uid, (0.0, 0, ()))
        wait = min(RETRY_FIRST_SECONDS * 2 ** failures, RETRY_MAX_SECONDS)
        self.retry_at[record.uid] = (self.clock() + wait, failures + 1, record.fingerprint if conflict else ())
        self.counts["conflicts" if conflict else "failed"] += 1
        log.warning("gang %s: binding pod %s failed (%s): %s", gang_key, record.name,
                    "waits for the pod to change" if conflict else f"retry in {wait:.1f} s", error,
                    extra={"gang": gang_key, "decision": "bind-failed"})

    # ----- kube-scheduler's /bind of a member in flight here ------------------------------------------------------
    def wait_for(self, uid: str, timeout: float) -> str | None:
        """The outcome of this binder's Binding of pod `uid` ("" bound, else the error); None when none is in flight."""
        future = self.in_flight.get(uid)
        if future is None:
            return None
        try:
            return future.result(timeout)
        except Exception as exc:  # noqa: BLE001 - timeout: report, kube-scheduler retries
            return f"meshfit's own binding of this pod did not finish in {timeout:.0f} s: {exc!r}"

    def forget_gone(self, known: dict) -> None:
        """Drop bookkeeping of pods no longer known (call under the lock)."""
        for table in (self.kube_handling, self.retry_at, self.refused):
            for uid in [u for u in table if u not in known]:
                del table[uid]

    def shutdown(self) -> None:
        """Stop the worker pool after the Bindings already started."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

