"""Capacity helpers shared by policies: how many pods of a given size fit per node and per domain."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.placement.jobs import Gang
from topology.model import ClusterTopology, TopologyError


def pod_slots(topo: ClusterTopology, gpus_per_pod: int, allowed: set[int] | None = None) -> list[int]:
    """Pods of `gpus_per_pod` GPUs that fit on each node (0 on unschedulable or excluded nodes)."""
    if gpus_per_pod <= 0:
        return [0] * len(topo.nodes)
    return [
        (node.gpus_free // gpus_per_pod) if (allowed is None or node.index in allowed) else 0
        for node in topo.nodes
    ]


def domain_pod_slots(topo: ClusterTopology, slots: list[int]) -> list[int]:
    """Pods that fit in each domain (sum of its nodes' slots), indexed by domain id."""
    per_domain = [0] * len(topo.domains)
    for node, count in zip(topo.nodes, slots):
        if count:
            for domain_id in node.path:
                per_domain[domain_id] += count
    return per_domain


def allowed_nodes(gang: Gang, topo: ClusterTopology) -> set[int] | None:
    """Nodes inside the gang's pre-assigned domains (e.g. a Kueue TAS assignment); None = all."""
    names = set(gang.constraint.assigned_domains)
    if not names:
        return None
    inside: set[int] = set()
    for domain in topo.domains:
        if domain.name in names:
            inside.update(domain.nodes)
    return inside


def largest_free_domain(topo: ClusterTopology, level: int, slots: list[int], gpus_per_pod: int) -> int:
    """GPUs usable by this gang's pods in the best domain at `level`."""
    per_domain = domain_pod_slots(topo, slots)
    return max((per_domain[d.id] * gpus_per_pod for d in topo.domains if d.level == level), default=0)


VOLCANO_TIER_PREFIX = "volcano-tier-"
"""Level names of the form `volcano-tier-N` mean Volcano HyperNode tier N (1 = just above hosts)."""


def resolve_level(topo: ClusterTopology, name: str) -> int:
    """Level index for a level name, label key or `volcano-tier-N`; TopologyError if unknown."""
    try:
        return topo.level_index(name)
    except TopologyError:
        if not name.startswith(VOLCANO_TIER_PREFIX):
            raise
    tier_text = name[len(VOLCANO_TIER_PREFIX):]
    if not tier_text.isdigit() or int(tier_text) < 1:
        raise TopologyError(f"bad Volcano tier {name!r}: expected {VOLCANO_TIER_PREFIX}N with N >= 1")
    return max(topo.host_level - int(tier_text), 0)


def constraint_levels(gang: Gang, topo: ClusterTopology) -> tuple[int | None, int | None]:
    """(required level index, preferred level index) of the gang's constraint, None where absent.

    TopologyError for a required level the cluster lacks; a preferred one it lacks is only a preference, so it
    counts as absent (the CLI warns about it: `scheduler.placement.level_check`)."""
    constraint = gang.constraint
    required = resolve_level(topo, constraint.required_level) if constraint.required_level else None
    preferred = None
    if constraint.preferred_level:
        try:
            preferred = resolve_level(topo, constraint.preferred_level)
        except TopologyError:
            preferred = None
    return required, preferred


def slice_level(gang: Gang, topo: ClusterTopology) -> int | None:
    """Level index of the gang's Kueue slice topology (None without slices); TopologyError if unknown."""
    name = gang.constraint.slice_required_level
    return resolve_level(topo, name) if name is not None else None


def slices_satisfied(gang: Gang, topo: ClusterTopology, pod_nodes: Sequence[int | str]) -> bool:
    """True if every slice's pods sit in one domain of the slice level (always True without slices).

    `pod_nodes` gives each pod's node by index or by name, in pod order.  Slice k is pods
    [k*size, (k+1)*size) (Kueue's consecutive-index slices).  TopologyError if the level is unknown.
    """
    level = slice_level(gang, topo)
    if level is None:
        return True
    size = gang.constraint.slice_size or 1
    if len(pod_nodes) != len(gang.pods) or len(pod_nodes) % size:
        return False
    nodes = [topo.node_by_name[n] if isinstance(n, str) else topo.nodes[n] for n in pod_nodes]
    domains = [node.path[level] for node in nodes]
    return all(len(set(domains[start:start + size])) == 1 for start in range(0, len(domains), size))


def slice_violation(policy: str, gang: Gang, topo: ClusterTopology, pod_nodes: Sequence[int | str]) -> str | None:
    """Why a slice-unaware policy's layout must be refused (it splits a Kueue slice), None when it is fine."""
    if not gang.constraint.has_slices:
        return None
    try:
        if slices_satisfied(gang, topo, pod_nodes):
            return None
    except TopologyError as exc:
        return f"topology constraint cannot be met: {exc}"
    constraint = gang.constraint
    return (f"{policy} does not model Kueue slices and its layout splits a slice of {constraint.slice_size} pods "
            f"across {constraint.slice_required_level} domains")
