"""Gang source: Kueue plain pod groups, and the Kueue TAS assignment for any Kueue-admitted pod.

Pod groups: `kueue.x-k8s.io/pod-group-name` label, `kueue.x-k8s.io/pod-group-total-count`
annotation, index from the `kueue.x-k8s.io/pod-group-pod-index` label (or the label named by the
`kueue.x-k8s.io/pod-group-pod-index-label` annotation).  TAS: a pod admitted with Topology Aware
Scheduling carries the `kueue.x-k8s.io/workload` annotation and `kueue.x-k8s.io/podset` label; its
Workload's `status.admission.podSetAssignments[].topologyAssignment` lists the chosen domains
(v1beta1 `levels` + `domains[].values` + `count`, or v1beta2 `slices`: `valuesPerLevel` universal or
individual `prefix` + roots + `suffix`, `podCounts`), whose lowest-level values become
`constraint.assigned_domains` so placement stays inside what Kueue admitted.  Where Kueue pins pods one by
one (hostname level, or several domains) -- its TopologyUngater gives the pod of rank i a nodeSelector for
the i-th domain slot, domains in order each repeated by its count -- the per-index domains also become
`constraint.pod_domains`, and every member stays in its own (Kueue's per-pod assignment wins: the nodeSelector
is fixed once the pod is ungated).
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
HOSTNAME_LABEL = "kubernetes.io/hostname"


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
        """Whatever source won: add the Kueue TAS assignment of the pod's Workload as `constraint.assigned_domains`,
        and as `constraint.pod_domains` where Kueue pins each pod to its own domain (`pinned_pod_domains`)."""
        domains = assigned_domains(pod, lookup)
        if domains and not member.constraint.assigned_domains:
            member = replace(member, constraint=replace(member.constraint, assigned_domains=domains))
        pinned = pinned_pod_domains(pod, lookup, member.size) if domains else ()
        if pinned and not member.constraint.pod_domains:
            member = replace(member, constraint=replace(member.constraint, pod_domains=pinned))
        return member


def _individual_values(values: Mapping[str, Any], count: int, where: str) -> list[str]:
    """Values of one level of a v1beta2 slice: universal, or prefix + roots[i] + suffix."""
    if values.get("universal") is not None:
        return [str(values["universal"])] * count
    individual = values.get("individual") if isinstance(values.get("individual"), Mapping) else {}
    roots = individual.get("roots") if isinstance(individual.get("roots"), list) else []
    if len(roots) != count:
        raise JobSpecError(f"{where}: slice has domainCount {count} but {len(roots)} roots")
    prefix, suffix = str(individual.get("prefix") or ""), str(individual.get("suffix") or "")
    return [f"{prefix}{root}{suffix}" for root in roots]


def _slice_counts(slice_: Mapping[str, Any], count: int, where: str) -> list[int]:
    """Pods per domain of a v1beta2 slice (`podCounts.universal` or `.individual`)."""
    counts = slice_.get("podCounts") if isinstance(slice_.get("podCounts"), Mapping) else {}
    if counts.get("universal") is not None:
        return [parse_count(counts["universal"], f"{where}: podCounts.universal", 1)] * count
    individual = counts.get("individual")
    if not isinstance(individual, list) or len(individual) != count:
        raise JobSpecError(f"{where}: slice has domainCount {count} but podCounts gives no count per domain")
    return [parse_count(c, f"{where}: podCounts.individual", 1) for c in individual]


def assignment_sequence(assignment: Mapping[str, Any], where: str) -> list[tuple[str, int]]:
    """(lowest-level domain, pods) of a Kueue `topologyAssignment` in Kueue's order (v1beta1 domains, v1beta2 slices)."""
    sequence: list[tuple[str, int]] = []
    for domain in assignment.get("domains") or ():
        values = domain.get("values") if isinstance(domain, Mapping) else None
        if not isinstance(values, list) or not values:
            raise JobSpecError(f"{where}: topologyAssignment domain without values")
        sequence.append((str(values[-1]), parse_count(domain.get("count", 1), f"{where}: domain count", 1)))
    for slice_ in assignment.get("slices") or ():
        per_level = slice_.get("valuesPerLevel") if isinstance(slice_, Mapping) else None
        if not isinstance(per_level, list) or not per_level:
            raise JobSpecError(f"{where}: topologyAssignment slice without valuesPerLevel")
        count = parse_count(slice_.get("domainCount", 1), f"{where}: slice domainCount", 1)
        sequence.extend(zip(_individual_values(per_level[-1], count, where), _slice_counts(slice_, count, where)))
    return sequence


def assignment_domains(assignment: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """Lowest-level domain names of a Kueue `topologyAssignment` (v1beta1 domains or v1beta2 slices)."""
    return tuple(dict.fromkeys(name for name, _ in assignment_sequence(assignment, where)))


def rank_domains(assignment: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """Per pod rank, the lowest-level domain Kueue's rank-based ordering gives it (what its TopologyUngater puts
    in that pod's nodeSelector): the domains in order, each repeated by its pod count."""
    return tuple(name for name, count in assignment_sequence(assignment, where) for _ in range(count))


def _topology_assignment(pod: dict, lookup: Lookup) -> tuple[Mapping[str, Any] | None, str]:
    """(the pod's podset `topologyAssignment` in its Workload's admission, where) -- None when there is none."""
    workload_name = label_or_annotation(pod, WORKLOAD_ANNOTATION)
    where = f"Workload {namespace_of(pod)}/{workload_name}"
    workload = lookup_kind(lookup, "Workload", KUEUE_GROUP, namespace_of(pod), workload_name)
    if workload is None:
        return None, where
    status = workload.get("status") if isinstance(workload.get("status"), Mapping) else {}
    admission = status.get("admission") if isinstance(status.get("admission"), Mapping) else {}
    assignments = [a for a in admission.get("podSetAssignments") or () if isinstance(a, Mapping)]
    podset = labels(pod).get(PODSET_LABEL)
    if podset:
        assignments = [a for a in assignments if a.get("name") == podset]
    elif len(assignments) > 1:
        return None, where
    for assignment in assignments:
        topology = assignment.get("topologyAssignment")
        if isinstance(topology, Mapping):
            return topology, where
    return None, where


def assigned_domains(pod: dict, lookup: Lookup) -> tuple[str, ...]:
    """Domains Kueue TAS admitted the pod's podset into; () when the pod is not TAS-admitted or unknown."""
    topology, where = _topology_assignment(pod, lookup)
    return assignment_domains(topology, where) if topology is not None else ()


def pinned_pod_domains(pod: dict, lookup: Lookup, size: int) -> tuple[str, ...]:
    """Per pod index, the domain Kueue pinned that pod to, when Kueue pins pods one by one: a rank-ordered pod
    (it carries the Job completion index, which Kueue's rank-based ordering reads) whose assignment is at the
    hostname level or spans several domains.  () otherwise (one domain above hosts: meshfit lays the gang out)."""
    topology, where = _topology_assignment(pod, lookup)
    if topology is None or label_or_annotation(pod, COMPLETION_INDEX) is None:
        return ()
    domains = rank_domains(topology, where)
    levels = topology.get("levels") if isinstance(topology.get("levels"), list) else []
    by_host = bool(levels) and levels[-1] == HOSTNAME_LABEL
    if len(domains) != size or (not by_host and len(set(domains)) < 2):
        return ()
    return domains


def factory() -> KueuePodGroupSource:
    """A new source instance."""
    return KueuePodGroupSource()
