"""`RoomGuard`, the `/guard` verb: kube-scheduler asks meshfit about every pod it places in its own cycle, so that
none takes room meshfit has given a gang member but kube-scheduler's cache cannot count yet.

kube-scheduler's filters count a member meshfit nominated only for pods of no higher priority, and a member meshfit
binds only once its informer shows the Binding.  A CPU pod of higher priority created in that window could be placed
into the member's room.  With `/guard` configured (a second extender entry: `filterVerb: guard`, no
`managedResources`, so every pod is asked about; `ignorable: true`, so an outage of meshfit never stops them), meshfit
turns away the nodes where the pod would not fit beside the members it holds, binds or has just bound there
(`GangNominations.answer_guard`), and the nomination fence judges such a pod by that answer
(`scheduler.service.binding.bind_fence`).  Pods of meshfit's own profile that ask for GPUs, and gang members, are
answered by `/filter`: `/guard` passes them through.
"""

from __future__ import annotations

from typing import Callable, Iterable

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.service.binding.gang_binding import GangBinding


class RoomGuard:
    """The `/guard` verb over one `ClusterState` and meshfit's direct binder (None: every pod passes)."""

    def __init__(self, state: ClusterState, direct: GangBinding | None,
                 scheduler_names: Callable[[], frozenset[str]]) -> None:
        self.state, self.direct, self.scheduler_names = state, direct, scheduler_names

    def guard(self, pod: dict, node_names: Iterable[str]) -> tuple[list[str] | None, dict[str, str]]:
        """(nodes `pod` may use of `node_names`, refused node -> why): the offered nodes where it fits beside the gang
        members meshfit holds, binds or just bound there.  None instead of the nodes: every offered node (pods `/filter`
        answers for, or no direct binding), decided without the state lock and without reading the node names."""
        if self.direct is None:
            return None, {}
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        record = self.state.pods.get(uid) if uid else None  # one dict read: no lock needed to look
        if record is not None and self._answered_by_filter(record):
            return None, {}
        nodes, failed = list(node_names), {}
        with self.state.lock:
            record = self.state.pods.get(uid) if uid else None  # as of now, under the lock
            if record is None:
                record = self.state.record_from_request(pod)  # newer than the watch: judged by its body alone
            if self._answered_by_filter(record):
                return None, {}
            self.direct.answer_guard(record, nodes, failed)
        return nodes, failed

    def _answered_by_filter(self, record: PodRecord) -> bool:
        """Gang members, and GPU pods of meshfit's profile: `/filter` decides for them."""
        return record.member is not None or bool(record.gpus and record.scheduler_name in self.scheduler_names())
