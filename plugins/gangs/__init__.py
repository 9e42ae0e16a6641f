"""Gang sources registered by name, tried in priority order: which gang a pod belongs to.

`identify(pod, lookup)` asks each source in `PRIORITY`; the first that recognises the pod wins.
Job-level sources (the ones that know the pod's rank block exactly) come before generic group
sources (PodGroups, Kueue pod groups), so a PyTorchJob scheduled through Volcano or coscheduling
still gets its Master-first indices.  Whatever the source, a Kueue TAS assignment of the pod's
Workload is added as `constraint.assigned_domains`.  GPU-less pods are not gang members (meshfit
places GPU gangs) unless they carry the explicit `meshfit.io/gang` label.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from plugins.gangs import coscheduling, indexed_job, jobset, kubeflow, kueue, meshfit_label, volcano
from plugins.gangs.base import LABEL_GANG, GangMembership, GangSource, Lookup, NotAGangMember, labels, pod_gpus

SOURCES: dict[str, Callable[[], GangSource]] = {
    meshfit_label.NAME: meshfit_label.factory,
    kubeflow.PYTORCH_NAME: kubeflow.pytorch_factory,
    kubeflow.TRAINJOB_NAME: kubeflow.trainjob_factory,
    jobset.NAME: jobset.factory,
    indexed_job.NAME: indexed_job.factory,
    volcano.NAME: volcano.factory,
    kueue.NAME: kueue.factory,
    coscheduling.NAME: coscheduling.factory,
}
"""Source name -> factory."""

PRIORITY: tuple[str, ...] = tuple(SOURCES)
"""Order in which sources are asked (first match wins)."""

_INSTANCES: tuple[GangSource, ...] = tuple(SOURCES[name]() for name in PRIORITY)


def _no_objects(kind: str, namespace: str, name: str) -> None:
    return None


def identify(pod: dict, lookup: Lookup | None = None) -> GangMembership | None:
    """The pod's gang membership (None = not in a gang); JobSpecError with one line if inconsistent."""
    lookup = lookup or _no_objects
    if not labels(pod).get(LABEL_GANG) and pod_gpus(pod) == 0:
        return None
    for source in _INSTANCES:
        try:
            member = source.identify(pod, lookup)
        except NotAGangMember:
            return None
        if member is None:
            continue
        domains = kueue.assigned_domains(pod, lookup)
        if domains and not member.constraint.assigned_domains:
            member = replace(member, constraint=replace(member.constraint, assigned_domains=domains))
        return member
    return None


__all__ = ["GangMembership", "GangSource", "Lookup", "NotAGangMember", "PRIORITY", "SOURCES", "identify"]
