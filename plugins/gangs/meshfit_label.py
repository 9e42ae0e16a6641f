"""Gang source: the plain `meshfit.io/gang: <name>` label with `meshfit.io/pod-index` / `meshfit.io/gang-size`."""

from __future__ import annotations

from plugins.gangs.base import (
    COMPLETION_INDEX, LABEL_GANG, GangMembership, Lookup, explicit_index, labels, optional_count, pod_label,
    resolve_membership,
)
from scheduler.placement.jobs import JobSpecError

NAME = "meshfit-label"


class MeshfitLabelSource:
    """Pods that name their gang themselves; index from `meshfit.io/pod-index` (or a Job completion index)."""

    name = NAME
    priority = 10
    """Order among gang sources (lower is asked first): the explicit label is asked first."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership from the meshfit label and annotations; None without the label."""
        gang = labels(pod).get(LABEL_GANG)
        if not gang:
            return None
        where = pod_label(pod)
        index = explicit_index(pod, where)
        if index is None:
            index = optional_count(pod, COMPLETION_INDEX, where)
        if index is None:
            raise JobSpecError(f"{where}: gang member of {gang} without annotation meshfit.io/pod-index")
        return resolve_membership(pod, lookup, source=NAME, gang_name=str(gang), index=index)


def factory() -> MeshfitLabelSource:
    """A new source instance."""
    return MeshfitLabelSource()
