"""Node usage and gang-wide pod facts of `ClusterState` (a mixin): requests per node, live members, whole-gang
evictions."""

from __future__ import annotations

from typing import Callable

from scheduler.cache.pod_record import PodRecord
from topology.k8s import FINISHED_PHASES


class NodeUsage:
    """Requests counted per node (`requested`, read by the direct binder's node-fit check), unbound pods nominated to
    each node (`nominated_to`) and gang-wide facts read from the pods; mixed into `ClusterState` (it provides
    `requested`, `nominated_to`, `pods`, `_uid_by_name`, `gang_index`, `superseded` and `gang_evicted`)."""

    requested: dict
    nominated_to: dict
    pods: dict
    _uid_by_name: dict
    gang_index: dict
    superseded: set
    gang_evicted: Callable[[str, set[str]], None] | None

    def _account(self, record: PodRecord, node: str | None) -> None:
        """Count `record`'s requests on `node` (None: nowhere) in `requested`, moving them off where they were."""
        if record.needs is None:
            return
        if record.accounted_on is not None:
            used = self.requested.get(record.accounted_on, {})
            for resource, value in record.needs.requests.items():
                used[resource] = used.get(resource, 0) - value
        record.accounted_on = node
        if node is not None:
            used = self.requested.setdefault(node, {})
            for resource, value in record.needs.requests.items():
                used[resource] = used.get(resource, 0) + value

    def _nominate(self, record: PodRecord, present: bool) -> None:
        """Keep `nominated_to` true for `record`: listed under its `status.nominatedNodeName` while it is `present`,
        unbound, unfinished, not terminating and its needs are known (kube-scheduler's filters count such a pod
        on that node for every pod of no higher priority; so does the direct binder)."""
        if record.nominated_on is not None:
            self.nominated_to.get(record.nominated_on, {}).pop(record.uid, None)
            record.nominated_on = None
        if present and record.nominated and not record.node and record.needs is not None \
                and record.phase not in FINISHED_PHASES and not record.terminating:
            self.nominated_to.setdefault(record.nominated, {})[record.uid] = record
            record.nominated_on = record.nominated

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
