"""`GangCalls`: the cluster calls the gang lifecycle makes for a gang's members -- requeues (counted, each pod's
history kept for the backoff), evictions, and Events, gang-wide ones on a single pod -- through the
`ActionDispatcher` (off the state lock); and `pod_ref` / `first_ref`, the pods those calls name."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.service.lifecycle.actions import EVENT_NORMAL, ActionDispatcher, PodRef


def pod_ref(record: PodRecord) -> PodRef:
    """The `PodRef` of a record."""
    return PodRef(record.namespace, record.name, record.uid)


def first_ref(members: list[PodRecord]) -> PodRef:
    """The pod gang-wide Events are recorded on: the member of lowest index."""
    return pod_ref(min(members, key=lambda r: r.member.index))


class GangCalls:
    """Requeues, evictions and Events for gang members, through one `ActionDispatcher`."""

    def __init__(self, dispatcher: ActionDispatcher, clock: Callable[[], float], counters: Counter) -> None:
        self.dispatcher, self.clock, self.counters = dispatcher, clock, counters
        self.requeued: dict[str, tuple[float, int]] = {}
        """Pod uid -> (last requeue time, requeues so far)."""

    def requeue(self, record: PodRecord, node: str | None) -> None:
        """Have kube-scheduler try `record` again (nominating `node`, when given): counted, noted for the backoff."""
        last, count = self.requeued.get(record.uid, (0.0, 0))
        self.requeued[record.uid] = (self.clock(), count + 1)
        self.counters["requeues"] += 1
        self.dispatcher.requeue(pod_ref(record), node)

    def event(self, record: PodRecord, reason: str, message: str, kind: str) -> None:
        """Record an Event of `kind` (Normal / Warning) on one member."""
        self.dispatcher.event(pod_ref(record), reason, message, kind)

    def evict(self, record: PodRecord, message: str) -> None:
        """Evict one member, saying why."""
        self.dispatcher.evict(pod_ref(record), message)

    def tell_gang(self, members: list[PodRecord], reason: str, message: str) -> None:
        """A Normal gang-wide Event on one pod (the lowest index): kube-scheduler already records its own
        `Scheduled` Event on every pod, and an API call per member per step would halve the bind rate."""
        if members:
            self.dispatcher.event(first_ref(members), reason, message, EVENT_NORMAL)
