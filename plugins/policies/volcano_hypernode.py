"""`volcano-hypernode`: Volcano network-topology-aware scheduling over HyperNodes, as published.

HyperNode tiers count up from the hosts: tier 1 is the level just above the host, tier 2 the next,
and so on.  Gradient search: from tier 1 up to `highestTierAllowed` (hard mode; a Volcano Job's
`networkTopology`), take the HyperNodes of that tier that can hold the whole job and pick the most
utilised one (HyperNode binpack); inside it, pods are placed one by one in task order on the node
the binpack plugin scores highest (most allocated after placement, ties by name).  Soft mode (and
jobs without `networkTopology`) walk every tier and fall back to the whole cluster.  Volcano has
no notion of rank layout: it only keeps the job inside one HyperNode.  Kueue slice constraints
(`podset-slice-*`) are not modelled: a layout that splits a slice is reported unschedulable, with
the reason, instead of being placed.
"""

from __future__ import annotations

import heapq

import numpy as np

from plugins.policies.meshfit_search import ROOT, SlotView, slot_view
from plugins.policies.ordering import topology_order
from scheduler.placement.capacity import constraint_levels, slice_violation
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError

NAME = "volcano-hypernode"


def binpack_nodes(gang: Gang, topo: ClusterTopology, view: SlotView, nodes: list[int] | np.ndarray) -> list[int]:
    """Pods in index order, each on the node with the highest utilisation after placing it."""
    g = gang.gpus_per_pod
    members = np.asarray(nodes, dtype=np.int64)
    usable = members[view.node_slots[members] > 0]
    heap = []
    for n, slots, free in zip(usable.tolist(), view.node_slots[usable].tolist(), view.node_free[usable].tolist()):
        node = topo.nodes[n]
        heap.append((-(node.gpus_total - free + g) / node.gpus_total, node.name, n, slots, free))
    heapq.heapify(heap)
    chosen: list[int] = []
    while len(chosen) < len(gang.pods) and heap:
        _, name, n, slots, free = heapq.heappop(heap)
        chosen.append(n)
        if slots > 1:
            total = topo.nodes[n].gpus_total
            free -= g
            heapq.heappush(heap, (-(total - free + g) / total, name, n, slots - 1, free))
    return chosen


def _pick_hypernode(topo: ClusterTopology, view: SlotView, level: int, pods: int) -> int | None:
    """The most utilised HyperNode at `level` that can hold every pod (ties by name, then by id)."""
    order = topology_order(topo)
    at_level = order.at_level[level]
    fitting = at_level[view.domain_slots[at_level] >= pods]
    if not fitting.size:
        return None
    total = order.domain_gpus[fitting]
    # a domain without GPUs has no free ones either: 0 / 1 = 0.0, as Volcano scores an empty HyperNode
    utilisation = (total - topo.free_arrays()[1][fitting]) / np.maximum(total, 1)
    most = np.flatnonzero(utilisation == utilisation.max())
    return int(fitting[most[np.argmin(order.domain_rank[fitting[most]])]])


class VolcanoHyperNodePolicy:
    """Lowest-tier HyperNode that fits (gradient from tier 1), then node binpack inside it."""

    name = NAME

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Walk tiers bottom-up; hard mode stops at highestTierAllowed, soft falls back to the cluster."""
        view = slot_view(gang, topo)
        pods = len(gang.pods)
        if view.total < pods:
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "does not fit")
        try:
            required, _ = constraint_levels(gang, topo)
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        highest = required if required is not None else 0
        chosen: int | None = None
        for level in range(topo.host_level - 1, highest - 1, -1):
            chosen = _pick_hypernode(topo, view, level, pods)
            if chosen is not None:
                break
        if chosen is None:
            if required is not None:
                return Assignment.unschedulable(unschedulable_reason(gang, topo) or
                                                f"no HyperNode up to tier {topo.host_level - required} fits")
            chosen = ROOT
        members = np.arange(len(topo.nodes)) if chosen == ROOT else topo.domains[chosen].nodes
        pod_nodes = binpack_nodes(gang, topo, view, members)
        broken = slice_violation(NAME, gang, topo, pod_nodes)
        return Assignment.unschedulable(broken) if broken else Assignment(tuple(pod_nodes))


def factory(**_options: object) -> VolcanoHyperNodePolicy:
    """Build the policy (it takes no options)."""
    return VolcanoHyperNodePolicy()
