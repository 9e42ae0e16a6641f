"""`first-fit`: walk nodes in name order and take free GPUs until the gang fits (no topology)."""

from __future__ import annotations

from scheduler.capacity import allowed_nodes, pod_slots
from scheduler.jobs import Gang
from scheduler.placement import Assignment
from topology.model import ClusterTopology

NAME = "first-fit"


class FirstFitPolicy:
    """Pods in index order onto nodes sorted by name, each node filled before the next."""

    name = NAME

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Fill nodes in name order; unschedulable if the free total is short."""
        slots = pod_slots(topo, gang.gpus_per_pod, allowed_nodes(gang, topo))
        chosen: list[int] = []
        for node in sorted(topo.nodes, key=lambda n: n.name):
            take = min(slots[node.index], len(gang.pods) - len(chosen))
            chosen.extend([node.index] * take)
            if len(chosen) == len(gang.pods):
                return Assignment(tuple(chosen))
        return Assignment.unschedulable(
            f"needs {len(gang.pods)} pods x {gang.gpus_per_pod} GPUs; only {len(chosen)} such pods fit")


def factory(**_options: object) -> FirstFitPolicy:
    """Build the policy (it takes no options)."""
    return FirstFitPolicy()
