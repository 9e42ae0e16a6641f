"""`PendingOutside`: the unbound pods kube-scheduler places without meshfit, indexed for the direct binder's
nomination fence (`scheduler.service.binding.bind_fence`), with the pod-event clock that fence reads."""

from __future__ import annotations

from collections import Counter

from scheduler.cache.pod_record import PodRecord
from topology.k8s import FINISHED_PHASES


class PendingOutside:
    """Uid -> (record, first event, latest event) of every pod kube-scheduler binds in its own cycle."""

    def __init__(self) -> None:
        self.pending_outside: dict[str, tuple[PodRecord, int, int]] = {}
        """Uid -> (record, first event, latest event) of unbound pods kube-scheduler binds without meshfit."""
        self.outside_since: dict[str, tuple[int, int, tuple]] = {}
        """Uid -> (first, latest event count, fingerprint) of a `pending_outside` pod (kept across its updates)."""
        self.outside_priorities: Counter[int] = Counter()
        """Priority -> how many `pending_outside` pods have it (`highest_outside_priority`)."""
        self.pod_events = 0
        """Pod changes indexed so far, in the order the watch delivered them (the nomination fence's clock)."""

    def clear(self) -> None:
        """Forget the listed pods (a relist lists them again); their first sightings and the clock stay."""
        self.pending_outside = {}
        self.outside_priorities = Counter()

    def track(self, record: PodRecord, present: bool) -> None:
        """Keep `pending_outside` true for `record`: an unbound, unfinished, live pod that is no gang member
        (kube-scheduler places it in its own cycle: a CPU pod, or a lone GPU pod meshfit only answers for) is listed
        with (the event count when first listed, the event count of its latest change).  The direct binder's
        nomination fence reads it: such a pod may be in kube-scheduler's cycle right now, and if it was so before
        kube-scheduler saw a member's nomination, it may still land on that node."""
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

    def highest_priority(self) -> int | None:
        """The highest priority of a `pending_outside` pod (None when there is none)."""
        return max(self.outside_priorities, default=None)
