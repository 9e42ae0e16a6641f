"""Gang source: scheduler-plugins coscheduling (`scheduling.x-k8s.io/pod-group` label + PodGroup minMember).

Coscheduling has no pod index of its own; the index comes from `meshfit.io/pod-index`, Kueue's
`kueue.x-k8s.io/pod-group-pod-index` or a Job completion index.  Job-owned pods carrying the label
(Kubeflow, TrainJob) are recognised earlier by their job's source.
"""

from __future__ import annotations

from plugins.gangs.base import (
    COMPLETION_INDEX, COSCHEDULING_LABEL, GangMembership, Lookup, explicit_index, labels, lookup_kind,
    namespace_of, optional_count, pod_label, resolve_membership,
)
from scheduler.placement.jobs import JobSpecError

NAME = "coscheduling"
PODGROUP_GROUP = "scheduling.x-k8s.io"
KUEUE_POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"


class CoschedulingSource:
    """Members of a coscheduling PodGroup; size from the PodGroup's `spec.minMember`."""

    name = NAME
    priority = 80
    """Order among gang sources (lower is asked first): group source, asked last."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for pods labelled with a coscheduling PodGroup; None otherwise."""
        group = labels(pod).get(COSCHEDULING_LABEL)
        if not group:
            return None
        where = pod_label(pod)
        index = explicit_index(pod, where)
        for key in (KUEUE_POD_INDEX, COMPLETION_INDEX):
            if index is None:
                index = optional_count(pod, key, where)
        if index is None:
            raise JobSpecError(f"{where}: member of PodGroup {group} has no index: set meshfit.io/pod-index")
        owner = lookup_kind(lookup, "PodGroup", PODGROUP_GROUP, namespace_of(pod), str(group))
        return resolve_membership(pod, lookup, source=NAME, gang_name=str(group), index=index, owner=owner)


def factory() -> CoschedulingSource:
    """A new source instance."""
    return CoschedulingSource()
