"""Rank-table publishing for bound gangs: when, what, and retrying after failures.

One write per gang: `GangScheduler` marks a gang due when it becomes fully bound (and again when a bound
gang changes: a member replaced, an elastic resize); a gang not (or no longer) fully bound is dropped
from the due list, since its members' own bind annotations already carry their assignment and the
table follows once the gang is whole.  A table identical to the one last published is not sent again.
`RankTableTracker.flush` snapshots the reservation under the state lock and builds and publishes the
ConfigMap outside it; one publisher at a time, so versions of one ConfigMap reach the API server in
order, each built from the state as of its own publish.

Publishing is off the bind path: `publish_soon` hands the gang to one background thread
(`meshfit-ranktables`, started on demand, gone after a second idle), so no verb waits for an API
round trip.  `wait_idle` waits for that
thread to finish what was queued (tests, and `GET /ranktables` so a read follows the filter that
caused it).  A failed publish never fails a request: it is logged, counted (`on_failure`) and stays
due, so the next bind of the gang (or the service's background sweep) tries again.
`MemoryRankTables` is the embedded mode's publisher, read back at `GET /ranktables/{namespace}/{name}`.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

from scheduler.handoff.rank_table import configmap_name, rank_table_configmap
from scheduler.service.binding.binder import RankTablePublisher, master_address, reservation_placement
from scheduler.gangs.ledger import SLOT_BOUND, STATUS_BOUND, Reservation
from scheduler.cache.state import ClusterState

log = logging.getLogger("meshfit.service")


class MemoryRankTables:
    """Implements `RankTablePublisher` in memory: ConfigMaps by (namespace, name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}

    def publish(self, configmap: dict[str, Any]) -> None:
        """Store (or replace) the ConfigMap."""
        meta = configmap["metadata"]
        with self._lock:
            self.configmaps[(str(meta.get("namespace") or "default"), str(meta["name"]))] = configmap

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored ConfigMap, or None."""
        with self._lock:
            return self.configmaps.get((namespace, name))


def lookup_rank_table(publisher: RankTablePublisher, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap of job `name` (or the ConfigMap named `name`) the publisher last published."""
    return publisher.get(namespace, configmap_name(name)) or publisher.get(namespace, name)


class RankTableTracker:
    """Which gangs' rank tables are due, and publishing them with retry on the next attempt."""

    def __init__(self, state: ClusterState, publisher: RankTablePublisher,
                 on_failure: Callable[[str, Exception], None] | None = None,
                 on_success: Callable[[str], None] | None = None, linger_seconds: float = 1.0) -> None:
        self.state = state
        self.publisher = publisher
        self.on_failure = on_failure
        self.on_success = on_success
        self.linger_seconds = linger_seconds
        """How long the background publisher waits for more work before its thread exits."""
        self._lock = threading.Lock()
        self._due: dict[str, int] = {}
        """Gang key -> version; a publish clears the gang only if no newer change came meanwhile."""
        self._publishing = threading.Lock()
        self._queue = threading.Condition(threading.Lock())
        self._queued: set[str] = set()
        self._busy = False
        self._worker: threading.Thread | None = None
        self.elastic_of: Callable[[Reservation], dict | None] = lambda entry: entry.elastic
        """The `elastic` section of a gang's table (called under the state lock;
        `scheduler.service.lifecycle.elastic`)."""
        self._last: dict[str, str] = {}
        """Gang key -> the table text last published (an unchanged table is not written again)."""

    def mark_due(self, gang_key: str) -> None:
        """The gang's rank table changed (reservation created, or every pod bound)."""
        with self._lock:
            self._due[gang_key] = self._due.get(gang_key, 0) + 1

    def forget(self, gang_key: str) -> None:
        """A new generation of the gang was reserved: its next table is published even if it reads the same."""
        self._last.pop(gang_key, None)

    def due(self) -> list[str]:
        """Gang keys whose rank table is not yet published as it stands."""
        with self._lock:
            return sorted(self._due)

    def flush(self, gang_keys: list[str] | None = None) -> int:
        """Publish the due rank tables (of `gang_keys`, or all); returns how many failed (they stay due)."""
        keys = self.due() if gang_keys is None else [k for k in gang_keys if k in self._due]
        if not keys:
            return 0
        failed = 0
        with self._publishing:  # one publisher at a time keeps versions of one ConfigMap in order
            for key in keys:
                failed += 0 if self._publish_one(key) else 1
        return failed

    def publish_soon(self, gang_keys: list[str]) -> None:
        """Queue the gangs' due rank tables for the background publisher; returns at once (no I/O here)."""
        with self._queue:
            self._queued.update(gang_keys)
            self._queue.notify_all()
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="meshfit-ranktables", daemon=True)
                self._worker.start()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until everything queued by `publish_soon` was attempted; False if `timeout` ran out first."""
        with self._queue:
            return self._queue.wait_for(lambda: not self._queued and not self._busy, timeout)

    def _work(self) -> None:
        while True:
            with self._queue:
                if not self._queued:
                    self._queue.wait(self.linger_seconds)
                if not self._queued:
                    self._worker = None
                    return
                keys, self._busy = sorted(self._queued), True
                self._queued.clear()
            try:
                self.flush(keys)
            except Exception:  # noqa: BLE001 - the publisher thread must outlive any bug in one gang's table
                log.exception("publishing the rank tables of %s failed", ", ".join(keys))
            finally:
                with self._queue:
                    self._busy = False
                    self._queue.notify_all()

    def _snapshot(self, gang_key: str) -> tuple | None:
        """(placement, master address, bound pod indices, elastic info) of the fully bound gang as of now, or None
        (gone, or not fully bound: nothing to publish until it is)."""
        with self.state.lock:
            entry = self.state.ledger.get(gang_key)
            if entry is None or entry.status != STATUS_BOUND:
                return None
            bound = {index for index, slot in entry.slots.items() if slot.state == SLOT_BOUND}
            members = sorted(self.state.gang_members(gang_key), key=lambda r: r.member.index)
            owners = [r.owner for r in members if r.owner and r.owner.get("kind") != "Pod"] or \
                     [r.owner for r in members if r.owner and r.member.index == 0]
            return (reservation_placement(entry), master_address(entry), bound, self.elastic_of(entry),
                    owners[0] if owners else None)

    def _publish_one(self, gang_key: str) -> bool:
        with self._lock:
            version = self._due.get(gang_key)
        if version is None:  # a concurrent flush published it while this one waited for `_publishing`
            return True
        snapshot = self._snapshot(gang_key)
        if snapshot is None:
            with self.state.lock:
                if self.state.ledger.get(gang_key) is None:
                    self._last.pop(gang_key, None)
        if snapshot is not None:
            placement, master, bound, elastic, owner = snapshot
            configmap = rank_table_configmap(placement, master, bound_pods=bound, elastic=elastic,  # off the lock
                                             owner=owner)
            text = json.dumps(configmap, sort_keys=True)
            try:
                if self._last.get(gang_key) != text:
                    self.publisher.publish(configmap)
                    self._last[gang_key] = text
            except Exception as exc:  # noqa: BLE001 - any publisher failure: log, count, retry later
                log.warning("publishing the rank table of gang %s failed (will retry): %s", gang_key, exc)
                if self.on_failure is not None:
                    self.on_failure(gang_key, exc)
                return False
            if self.on_success is not None:
                self.on_success(gang_key)
        with self._lock:
            if self._due.get(gang_key) == version:
                del self._due[gang_key]
        return True
