"""Gang source: Kubernetes' own gang API (`scheduling.k8s.io` Workload / PodGroup, alpha since 1.35).

Two shapes, one source (the served version is found by discovery, `scheduler.kube.discovery`):

- 1.35, `v1alpha1`: a `Workload` lists `spec.podGroups[]` (`name`, `policy.gang.minCount` or
  `policy.basic`); a pod points at one with `spec.workloadRef: {name, podGroup, podGroupReplicaKey?}`.
  Pods of one replica key form one gang: `<workload>-<podGroup>[-<key>]`.
- 1.36, `v1alpha2`: a `PodGroup` object carries `spec.schedulingPolicy.gang.minCount`; a pod points at it with
  `spec.schedulingGroup.podGroupName`.  The gang is the PodGroup.
- 1.37, `v1beta1`: the same PodGroup shape (it names its Workload template with `spec.workloadRef`).  With the
  `CompositePodGroup` gate, a PodGroup may sit under a `v1alpha3` `CompositePodGroup`
  (`spec.parentCompositePodGroupName`): a job that spans a spine with one sub-group per leaf.  The gang is then
  the CompositePodGroup: its `schedulingConstraints.topology[].key` is meshfit's required level, and its size
  `schedulingPolicy.gang.minGroupCount` sub-groups of the member's own PodGroup's `minCount` (sub-groups of one
  template, as a Workload's composite template makes them).  Each sub-group is one slice (the two-level placement
  Kueue's slice annotations ask for): its members take one block of consecutive indexes
  (`GangMembership.sub_group`, `scheduler.gangs.stable_index`) and the placement keeps the block inside one domain
  of the sub-groups' key (a leaf), as kube-scheduler's group cycle requires of each sub-group.  Without a composite
  key the sub-groups' key is the gang's required level.

Only `gang` groups are gangs (a `basic` group's pods are scheduled one by one).  The gang size is `minCount`; a
PodGroup's required level is its `spec.schedulingConstraints.topology[].key` (a node label key, one at most).  A
pod's index comes from `meshfit.io/pod-index`, else the Job completion index; a member with neither gets a stable
one from meshfit (`GangMembership.own_index` False, `scheduler.gangs.stable_index`), written to the pod with its ranks
and kept for the pod that replaces it.  Which version the cluster serves is asked of the API server
(`scheduler.kube.discovery`); the objects are told apart here by their shape, so either version's objects read the
same.  The Python client has no typed field for these yet: pods are read as raw JSON.  With kube-scheduler's
in-tree `GangScheduling` plugin on, kube-scheduler holds the members at Permit and binds them together; meshfit
filters and scores them (topology and ranks) and leaves their binding to kube-scheduler (`scheduler.kube.node_fit`
marks them so).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from plugins.gangs.base import (
    COMPLETION_INDEX, GangMembership, Lookup, explicit_index, lookup_kind, namespace_of, optional_count, pod_label,
    resolve_membership,
)
from scheduler.placement.jobs import MAX_GANG_PODS, JobSpecError

NAME = "workload-api"
GROUP = "scheduling.k8s.io"


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _min_count(policy: Any, where: str) -> int | None:
    """`policy.gang.minCount` (None for a `basic` policy); JobSpecError when a gang policy has no valid count."""
    if not isinstance(policy, Mapping) or "gang" not in policy:
        return None
    count = (policy.get("gang") or {}).get("minCount")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_GANG_PODS:
        raise JobSpecError(f"{where}: gang policy minCount must be an integer from 1 to {MAX_GANG_PODS}, got {count!r}")
    return count


def _index(pod: dict, where: str) -> int | None:
    """The pod's own index (`meshfit.io/pod-index`, else a Job completion index); None: meshfit gives it one."""
    index = explicit_index(pod, where)
    return optional_count(pod, COMPLETION_INDEX, where) if index is None else index


def required_key(group: Mapping[str, Any], where: str) -> str | None:
    """`spec.schedulingConstraints.topology[].key` of a PodGroup or CompositePodGroup (None without one); JobSpecError when
    malformed or when several keys are given (the API allows one)."""
    constraints = _spec(group).get("schedulingConstraints")
    if constraints is None:
        return None
    topology = constraints.get("topology") if isinstance(constraints, Mapping) else None
    if topology is None:
        return None
    if not isinstance(topology, list) or not all(isinstance(t, Mapping) for t in topology):
        raise JobSpecError(f"{where}: spec.schedulingConstraints.topology must be a list of {{key: LABEL}}")
    keys = [str(t.get("key") or "").strip() for t in topology]
    if any(not key for key in keys):
        raise JobSpecError(f"{where}: spec.schedulingConstraints.topology has an entry without a key")
    if len(set(keys)) > 1:
        raise JobSpecError(f"{where}: spec.schedulingConstraints.topology names {len(set(keys))} keys "
                           f"{sorted(set(keys))}; one is supported")
    return keys[0] if keys else None


class WorkloadApiSource:
    """Members of a `Workload` pod group (v1alpha1), a `PodGroup` (v1alpha2, v1beta1) or a `CompositePodGroup`
    (v1alpha3) with a gang policy."""

    name = NAME
    priority = 5
    """Asked first: a pod that points at a Workload declares its gang explicitly (its Job is only the runtime)."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for pods with `spec.workloadRef` or `spec.schedulingGroup`; None otherwise."""
        spec = _spec(pod)
        ref, group = spec.get("workloadRef"), spec.get("schedulingGroup")
        if isinstance(ref, Mapping) and ref.get("name"):
            return self._from_workload(pod, ref, lookup)
        if isinstance(group, Mapping) and group.get("podGroupName"):
            return self._from_pod_group(pod, str(group["podGroupName"]), lookup)
        return None

    def _from_workload(self, pod: dict, ref: Mapping[str, Any], lookup: Lookup) -> GangMembership | None:
        where, namespace = pod_label(pod), namespace_of(pod)
        workload = lookup_kind(lookup, "Workload", GROUP, namespace, str(ref["name"]))
        if workload is None:
            raise JobSpecError(f"{where}: Workload {namespace}/{ref['name']} (spec.workloadRef) is not known yet")
        group_name = str(ref.get("podGroup") or "")
        groups = [g for g in _spec(workload).get("podGroups") or () if isinstance(g, Mapping)]
        found = next((g for g in groups if g.get("name") == group_name), None)
        if found is None:
            raise JobSpecError(f"{where}: Workload {namespace}/{ref['name']} has no pod group {group_name!r}")
        size = _min_count(found.get("policy"), f"{where}: Workload {ref['name']} pod group {group_name}")
        if size is None:
            return None  # a basic group: its pods are scheduled one by one
        key = str(ref.get("podGroupReplicaKey") or "")
        gang = f"{ref['name']}-{group_name}" + (f"-{key}" if key else "")
        return resolve_membership(pod, lookup, source=NAME, gang_name=gang, index=_index(pod, where), size=size,
                                  owner=workload)

    def _from_pod_group(self, pod: dict, name: str, lookup: Lookup) -> GangMembership | None:
        where, namespace = pod_label(pod), namespace_of(pod)
        group = lookup_kind(lookup, "PodGroup", GROUP, namespace, name)
        if group is None:
            raise JobSpecError(f"{where}: PodGroup {namespace}/{name} (spec.schedulingGroup) is not known yet")
        size = _min_count(_spec(group).get("schedulingPolicy"), f"{where}: PodGroup {name}")
        if size is None:
            return None
        key = required_key(group, f"{where}: PodGroup {name}")
        parent = _spec(group).get("parentCompositePodGroupName")
        if parent:
            return self._from_composite(pod, str(parent), size, key, lookup)
        return resolve_membership(pod, lookup, source=NAME, gang_name=name, index=_index(pod, where), size=size,
                                  owner=group, required_level=key)

    def _from_composite(self, pod: dict, name: str, child_size: int, child_key: str | None,
                        lookup: Lookup) -> GangMembership | None:
        """The member of a sub-group of CompositePodGroup `name`: the composite is the gang (module docstring)."""
        where, namespace = pod_label(pod), namespace_of(pod)
        composite = lookup_kind(lookup, "CompositePodGroup", GROUP, namespace, name)
        if composite is None:
            raise JobSpecError(f"{where}: CompositePodGroup {namespace}/{name} (its PodGroup's "
                               "spec.parentCompositePodGroupName) is not known yet")
        policy = _spec(composite).get("schedulingPolicy")
        if not isinstance(policy, Mapping) or "gang" not in policy:
            return None  # a basic composite: its sub-groups are independent gangs of their own
        groups = (policy.get("gang") or {}).get("minGroupCount")
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 \
                or groups * child_size > MAX_GANG_PODS:
            raise JobSpecError(f"{where}: CompositePodGroup {name} gang policy minGroupCount must be an integer from "
                               f"1 to {MAX_GANG_PODS // child_size} (sub-groups of {child_size}), got {groups!r}")
        spine = required_key(composite, f"{where}: CompositePodGroup {name}")
        member = resolve_membership(pod, lookup, source=NAME, gang_name=name, index=_index(pod, where),
                                    size=groups * child_size, owner=composite, required_level=spine or child_key)
        if not (spine and child_key):
            return member
        if member.constraint.has_slices:
            raise JobSpecError(f"{where}: sub-group of CompositePodGroup {name} also asks for Kueue slices; the "
                               "sub-groups are the slices")
        return replace(member, sub_group=str((_spec(pod).get("schedulingGroup") or {}).get("podGroupName")),
                       constraint=replace(member.constraint, slice_required_level=child_key, slice_size=child_size))


def factory() -> WorkloadApiSource:
    """A new source instance."""
    return WorkloadApiSource()
