"""`random`: a seeded uniformly random choice of free pod slots (a floor for comparisons)."""

from __future__ import annotations

import random

from plugins.policies.meshfit_search import slot_view
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology

NAME = "random"


class RandomPolicy:
    """Pods on random free slots; the same seed and gang give the same answer."""

    name = NAME

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Sample one slot per pod without replacement among every free pod slot."""
        view = slot_view(gang, topo)
        if view.total < len(gang.pods):
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "does not fit")
        slots = [n for n in range(len(topo.nodes)) for _ in range(int(view.node_slots[n]))]
        rng = random.Random(f"{self.seed}:{gang.key}")
        return Assignment(tuple(rng.sample(slots, len(gang.pods))))


def factory(seed: int = 0, **_options: object) -> RandomPolicy:
    """Build the policy with a seed."""
    return RandomPolicy(seed=int(seed))
