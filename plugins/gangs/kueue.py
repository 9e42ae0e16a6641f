"""Gang source: Kueue plain pod groups, and the Kueue TAS assignment for any Kueue-admitted pod.

Pod groups: `kueue.x-k8s.io/pod-group-name` label, `kueue.x-k8s.io/pod-group-total-count`
annotation, index from the `kueue.x-k8s.io/pod-group-pod-index` label (or the label named by the
`kueue.x-k8s.io/pod-group-pod-index-label` annotation).  TAS: a pod admitted with Topology Aware
Scheduling carries the `kueue.x-k8s.io/workload` annotation and `kueue.x-k8s.io/podset` label; its
Workload's `status.admission.podSetAssignments[].topologyAssignment` lists the chosen domains
(v1beta1 `levels` + `domains[].values`, or v1beta2 `slices`), whose lowest-level values become
`constraint.assigned_domains` so placement stays inside what Kueue admitted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from plugins.gangs.base import (
    COMPLETION_INDEX, GangMembership, Lookup, annotations, explicit_index, label_or_annotation, labels,
    lookup_kind, namespace_of, optional_count, parse_count, pod_label, resolve_membership,
)
from scheduler.placement.jobs import JobSpecError

NAME = "kueue"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
POD_GROUP_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
POD_GROUP_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index-label"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
KUEUE_GROUP = "kueue.x-k8s.io"


def _pod_group_index(pod: dict, where: str) -> int | None:
    index = explicit_index(pod, where)
    if index is None:
        index = optional_count(pod, POD_GROUP_INDEX, where)
    custom = annotations(pod).get(POD_GROUP_INDEX_LABEL)
    if index is None and custom:
        index = optional_count(pod, str(custom), where)
    if index is None:
        index = optional_count(pod, COMPLETION_INDEX, where)
    return index


class KueuePodGroupSource:
    """Members of a Kueue plain-pod group; size from `pod-group-total-count`."""

    name = NAME
    priority = 70
    """Order among gang sources (lower is asked first): group source."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for pods labelled with a Kueue pod group; None otherwise."""
        group = labels(pod).get(POD_GROUP_NAME)
        if not group:
            return None
        where = pod_label(pod)
        index = _pod_group_index(pod, where)
        if index is None:
            raise JobSpecError(f"{where}: member of Kueue pod group {group} has no index: set the "
                               f"{POD_GROUP_INDEX} label (or meshfit.io/pod-index)")
        size = optional_count(pod, POD_GROUP_TOTAL, where, 1)
        return resolve_membership(pod, lookup, source=NAME, gang_name=str(group), index=index, size=size)

    def refine(self, member: GangMembership, pod: dict, lookup: Lookup) -> GangMembership:
        """Whatever source won: add the Kueue TAS assignment of the pod's Workload as `constraint.assigned_domains`."""
        domains = assigned_domains(pod, lookup)
        if domains and not member.constraint.assigned_domains:
            member = replace(member, constraint=replace(member.constraint, assigned_domains=domains))
        return member


def _individual_values(values: Mapping[str, Any], count: int, where: str) -> list[str]:
    """Values of one level of a v1beta2 slice: universal, or prefix + roots[i] + suffix."""
    if values.get("universal") is not None:
        return [str(values["universal"])] * count
    individual = values.get("individual") if isinstance(values.get("individual"), Mapping) else {}
    roots = individual.get("roots") if isinstance(individual.get("roots"), list) else []
    if len(roots) != count:
        raise JobSpecError(f"{where}: slice has domainCount {count} but {len(roots)} roots")
    prefix, suffix = str(individual.get("commonPrefix") or ""), str(individual.get("commonSuffix") or "")
    return [f"{prefix}{root}{suffix}" for root in roots]


def assignment_domains(assignment: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """Lowest-level domain names of a Kueue `topologyAssignment` (v1beta1 domains or v1beta2 slices)."""
    names: list[str] = []
    for domain in assignment.get("domains") or ():
        values = domain.get("values") if isinstance(domain, Mapping) else None
        if not isinstance(values, list) or not values:
            raise JobSpecError(f"{where}: topologyAssignment domain without values")
        names.append(str(values[-1]))
    for slice_ in assignment.get("slices") or ():
        per_level = slice_.get("valuesPerLevel") if isinstance(slice_, Mapping) else None
        if not isinstance(per_level, list) or not per_level:
            raise JobSpecError(f"{where}: topologyAssignment slice without valuesPerLevel")
        count = parse_count(slice_.get("domainCount", 1), f"{where}: slice domainCount", 1)
        names.extend(_individual_values(per_level[-1], count, where))
    return tuple(dict.fromkeys(names))


def assigned_domains(pod: dict, lookup: Lookup) -> tuple[str, ...]:
    """Domains Kueue TAS admitted the pod's podset into; () when the pod is not TAS-admitted or unknown."""
    workload_name = label_or_annotation(pod, WORKLOAD_ANNOTATION)
    workload = lookup_kind(lookup, "Workload", KUEUE_GROUP, namespace_of(pod), workload_name)
    if workload is None:
        return ()
    status = workload.get("status") if isinstance(workload.get("status"), Mapping) else {}
    admission = status.get("admission") if isinstance(status.get("admission"), Mapping) else {}
    assignments = [a for a in admission.get("podSetAssignments") or () if isinstance(a, Mapping)]
    podset = labels(pod).get(PODSET_LABEL)
    if podset:
        assignments = [a for a in assignments if a.get("name") == podset]
    elif len(assignments) > 1:
        return ()
    where = f"Workload {namespace_of(pod)}/{workload_name}"
    for assignment in assignments:
        topology = assignment.get("topologyAssignment")
        if isinstance(topology, Mapping):
            return assignment_domains(topology, where)
    return ()


def factory() -> KueuePodGroupSource:
    """A new source instance."""
    return KueuePodGroupSource()
