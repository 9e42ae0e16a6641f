"""Node usage and gang-wide pod facts of `ClusterState` (a mixin): requests per node, live members, whole-gang
evictions."""

from __future__ import annotations

from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from topology.k8s import FINISHED_PHASES


class NodeUsage:
    """Requests counted per node (`requested`, read by the direct binder's node-fit check), unbound pods nominated to
    each node (`nominated_to`) and gang-wide facts read from the pods; mixed into `ClusterState` (it provides
    `requested`, `nominated_to`, `pods`, `_uid_by_name`, `gang_index`, `superseded` and `gang_evicted`)."""

    lock: Any
    room: Any
    pending_outside: dict
    outside_priorities: Any
    outside_since: dict
    pod_events: int
    pods: dict
    _uid_by_name: dict
    gang_index: dict
    superseded: set
    gang_evicted: Callable[[str, set[str]], None] | None

    def _track_outside(self, record: PodRecord, present: bool) -> None:
        """Keep `pending_outside` true for `record`: an unbound, unfinished, live pod that is no gang member (kube-scheduler
        places it in its own cycle: a CPU pod, or a lone GPU pod meshfit only answers for) is listed with (the event count when first listed, the event count of its latest
        change).  The direct binder's nomination fence reads it: such a pod may be in kube-scheduler's cycle right
        now, and if it was so before kube-scheduler saw a member's nomination, it may still land on that node."""
        self.pod_events += 1
        listed = self.pending_outside.pop(record.uid, None)
        if listed is not None:
            priority = listed[0].priority
            self.outside_priorities[priority] -= 1
            if not self.outside_priorities[priority]:
                del self.outside_priorities[priority]
        if not present:
            return  # a replaced version, or the pod is gone: `outside_since` keeps its first sighting meanwhile
        if record.member is None and not record.node and record.needs is not None \
                and record.phase not in FINISHED_PHASES and not record.terminating:
            first, last, fingerprint = self.outside_since.get(record.uid, (self.pod_events, 0, None))
            if fingerprint != record.fingerprint:  # changed (or new): its latest change is now
                last, fingerprint = self.pod_events, record.fingerprint
            self.outside_since[record.uid] = (first, last, fingerprint)
            self.pending_outside[record.uid] = (record, first, last)
            self.outside_priorities[record.priority] += 1
        else:
            self.outside_since.pop(record.uid, None)
        if len(self.outside_since) > 2 * len(self.pending_outside) + 1024:  # pods deleted while pending
            self.outside_since = {uid: n for uid, n in self.outside_since.items() if uid in self.pending_outside}

    def highest_outside_priority(self) -> int | None:
        """The highest priority of a `pending_outside` pod (None when there is none)."""
        return max(self.outside_priorities, default=None)

    def note_nomination(self, namespace: str, name: str, uid: str, node: str | None) -> None:
        """A nomination was written for pod `namespace/name` (embedded mode: no watch reports it back)."""
        with self.lock:
            known = self._uid_by_name.get((namespace, name))
            record = self.pods.get(known) if known is not None else None
            if record is not None and (not uid or record.uid == uid):
                record.nominated = node or ""
                self.room.observe_pod(record)
                self._track_outside(record, True)

    def _live_member(self, name: str, namespace: str) -> bool:
        """True while pod `namespace/name` exists, is not finished and is not being deleted."""
        uid = self._uid_by_name.get((namespace, name))
        record = self.pods.get(uid) if uid is not None else None
        return record is not None and record.phase not in FINISHED_PHASES and not record.terminating

    def _whole_gang_terminating(self, gang_key: str) -> bool:
        """True (and `gang_evicted` told) when every bound member of the gang is terminating: the whole gang is being
        evicted by someone else, so none of its slots may be kept for replacements."""
        bound = [r for r in self.gang_index.get(gang_key, {}).values() if r.node and r.uid not in self.superseded]
        if not bound or not all(r.terminating for r in bound):
            return False
        if self.gang_evicted is not None:
            self.gang_evicted(gang_key, {r.uid for r in bound})
        return True
