"""`NominationWriter`: meshfit writes a reserved member's `status.nominatedNodeName` before binding it where a pod may
race it (kube-scheduler's filters then count the member's requests on its node for pods of no higher priority), and
clears nominations it wrote for members whose reservation went elsewhere.  See `scheduler.service.binding.gang_binding`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_BINDING, SLOT_RESERVED
from scheduler.service.binding.binder import BindConflict
from scheduler.service.binding.binder import Nominator
from scheduler.service.binding.member_holds import MemberHolds
from scheduler.service.binding.retries import BindRetries
from scheduler.service.binding.workers import BindingWorkers

log = logging.getLogger("meshfit.bind")

WATCH_LAG_SECONDS = 1.0
"""How long a nomination written is awaited in the watch before it is written again (someone cleared it), at least:
while the watch has not reached the write's `resourceVersion` it is awaited however long that takes (a watch that lags
under a burst would otherwise have the same nomination written again and again)."""


def watch_behind(record: PodRecord, written: str | None) -> bool:
    """True while the watch has not yet shown the pod as of the write that gave it `resourceVersion` `written`: its
    record is older, so a nomination missing from it was not cleared by anyone, only not seen yet.  Resource
    versions are compared as the integers the API server gives (etcd revisions); anything else says False (the caller
    then goes by time alone)."""
    seen = record.fingerprint[2] if len(record.fingerprint) == 3 else None
    if written is None or not isinstance(seen, str):  # no resourceVersion in the pod (a request body's digest)
        return False
    try:
        return int(seen) < int(written)
    except (TypeError, ValueError):
        return False


class NominationWriter:
    """Writes and clears members' nominations on the nomination workers (decisions under the state lock)."""

    def __init__(self, state: Any, nominator: Nominator, holds: MemberHolds, workers: BindingWorkers,
                 retries: BindRetries, counts: dict[str, int], clock: Callable[[], float],
                 nominated_callback: Callable[[PodRecord], None], wake_later: Callable[[str, float], None],
                 in_flight: Callable[[str], bool]) -> None:
        self.state, self.nominator, self.holds, self.workers = state, nominator, holds, workers
        self.retries, self.counts, self.clock = retries, counts, clock
        self.nominated_callback, self.wake_later, self.in_flight = nominated_callback, wake_later, in_flight
        self.nominating: dict[str, str] = {}
        """Pod uid -> the node a nomination write in flight names."""
        self.nominated: dict[str, tuple[str, float, str | None]] = {}
        """Pod uid -> (node, when, the pod's resourceVersion after the write) of the last nomination written and
        accepted."""

    def nominate(self, record: PodRecord, node: str | None) -> None:
        """Write `node` as the pod's nomination (None: clear it) on a worker, unless that write is under way or was
        just accepted and the watch has not shown it yet.  The member is held there from now on."""
        if node is not None:
            self.holds.hold(record, node)  # counted there now, not only once the watch shows the nomination
        else:
            self.holds.let_go(record.uid)
        if record.uid in self.nominating:
            return
        written = self.nominated.get(record.uid)
        if node is not None and written is not None and written[0] == node \
                and (self.clock() - written[1] < WATCH_LAG_SECONDS or watch_behind(record, written[2])):
            self.wake_later(record.member.gang_key if record.member else "", WATCH_LAG_SECONDS)
            return
        self.nominating[record.uid] = node or ""
        self.workers.nominate(lambda: self._post(record, node))

    def _post(self, record: PodRecord, node: str | None) -> None:
        with self.state.lock:
            if node is not None and self._moot(record):
                self.nominating.pop(record.uid, None)
                self.counts["nominate_skipped"] += 1
                return
        error, version = "", None
        try:
            version = self.nominator.nominate(record.namespace, record.name, record.uid, node)
        except BindConflict as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure: retried with backoff
            error = f"nominating node {node} for pod {record.key} failed: {exc}"
        with self.state.lock:
            self.nominating.pop(record.uid, None)
            if error:
                self.counts["nominate_failed"] += 1
                self.retries.back_off(record, conflict=False)
                log.warning("pod %s: %s", record.key, error, extra={"pod": record.key, "decision": "nominate-failed"})
            elif node is None:
                self.nominated.pop(record.uid, None)
                self.counts["cleared"] += 1
            else:
                self.nominated[record.uid] = (node, self.clock(), version)
                self.counts["nominated"] += 1
            if record.member is not None and not error and node is not None:
                self.nominated_callback(record)  # in memory the nomination is in the state already

    def _moot(self, record: PodRecord) -> bool:
        """True when a nomination queued for `record` need not be written any more (under the lock): the pod is gone,
        bound or terminating, its Binding is in flight, or kube-scheduler was told its node at `/filter` (its own cache
        assumes it there, which is what the nomination was for).  A burst's nominations queue behind each other; by a
        member's turn kube-scheduler has often bound it, and the API server refuses the write."""
        current = self.state.pods.get(record.uid)
        return (current is None or bool(current.node) or current.terminating or self.holds.assumed(record.uid)
                or self.in_flight(record.uid))

    def clear_stale(self) -> None:
        """Clear nominations written for members whose slot is no longer reserved on that node."""
        for uid, (node, _, _) in list(self.nominated.items()):
            record = self.state.pods.get(uid)
            if record is None or record.node or record.member is None:
                self.nominated.pop(uid, None)
                continue
            entry = self.state.ledger.get(record.member.gang_key)
            slot = entry.slots.get(record.member.index) if entry is not None else None
            if (slot is None or slot.node != node or slot.state not in (SLOT_RESERVED, SLOT_BINDING)) \
                    and record.nominated == node:
                self.nominate(record, None)
