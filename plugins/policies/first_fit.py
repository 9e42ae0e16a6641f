"""`first-fit`: walk nodes in name order and take free GPUs until the gang fits (no topology).

It does not model Kueue slices: a gang with `podset-slice-*` constraints is placed as usual and
reported unschedulable (with the reason) when that layout breaks a slice, never placed in violation.
"""

from __future__ import annotations

import numpy as np

from plugins.policies.ordering import topology_order
from scheduler.placement.capacity import allowed_nodes, slice_violation
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology

NAME = "first-fit"


def node_pod_slots(gang: Gang, topo: ClusterTopology) -> np.ndarray:
    """Pods of this gang that fit on each node index (0 on unschedulable nodes and outside assigned domains)."""
    g = gang.gpus_per_pod
    if g <= 0:
        return np.zeros(len(topo.nodes), dtype=np.int64)
    slots = topo.free_arrays()[0] // g
    allowed = allowed_nodes(gang, topo)
    if allowed is not None:
        mask = np.zeros(len(topo.nodes), dtype=bool)
        mask[list(allowed)] = True
        slots = np.where(mask, slots, 0)
    return slots


class FirstFitPolicy:
    """Pods in index order onto nodes sorted by name, each node filled before the next."""

    name = NAME

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Fill nodes in name order; unschedulable if the free total is short."""
        pods = len(gang.pods)
        by_name = topology_order(topo).nodes_by_name
        slots = node_pod_slots(gang, topo)[by_name]
        filled = np.cumsum(slots)
        last = int(np.searchsorted(filled, pods, side="left"))
        if last == by_name.size:
            return Assignment.unschedulable(
                f"needs {pods} pods x {gang.gpus_per_pod} GPUs; only {int(filled[-1]) if last else 0} such pods fit")
        takes = slots[: last + 1].copy()
        takes[last] -= int(filled[last]) - pods
        pod_nodes = tuple(np.repeat(by_name[: last + 1], takes).tolist())
        broken = slice_violation(NAME, gang, topo, pod_nodes)
        return Assignment.unschedulable(broken) if broken else Assignment(pod_nodes)


def factory(**_options: object) -> FirstFitPolicy:
    """Build the policy (it takes no options)."""
    return FirstFitPolicy()
