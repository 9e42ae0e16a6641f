"""`kueue-tas`: Kueue Topology-Aware Scheduling (KEP-2724) with its BestFit profile, as published.

1. Start at the requested level (`podset-required-topology` / `-preferred-topology`; a podset with
   neither is treated as preferred at the lowest level).  If a single domain there fits the
   podset, take the one with the least free capacity that fits (BestFit).  Otherwise: required
   -> unschedulable; preferred -> go one level up; at the top level, take domains greedily (most
   free first).
2. Descend level by level: pool the children of the chosen domains, sort them by free capacity
   (descending, then by name), take them greedily, and give the remainder to the smallest child
   that still fits it (BestFit).
3. Rank-ordered assignment: the chosen hosts are sorted by their topology values (outermost
   first, as Kueue orders a TopologyAssignment) and pods fill them in index order.

Kueue knows nothing about tensor/pipeline/data axes; it only keeps consecutive indices together.
"""

from __future__ import annotations

from plugins.policies.meshfit_search import SlotView, slot_view
from scheduler.capacity import constraint_levels
from scheduler.explain import unschedulable_reason
from scheduler.jobs import Gang
from scheduler.placement import Assignment
from topology.model import ClusterTopology, TopologyError

NAME = "kueue-tas"


def _sorted_desc(topo: ClusterTopology, view: SlotView, domains: list[int]) -> list[int]:
    """Domains by free pod slots descending, then by name (Kueue's sortedDomains)."""
    return sorted(domains, key=lambda d: (-view.slots(d), topo.domains[d].name))


def _take_minimum(topo: ClusterTopology, view: SlotView, domains: list[int], count: int) -> list[tuple[int, int]]:
    """Greedy most-free-first with a BestFit last domain: (domain, pods) pairs covering `count`."""
    chosen: list[tuple[int, int]] = []
    remaining = count
    pool = _sorted_desc(topo, view, [d for d in domains if view.slots(d) > 0])
    while remaining > 0 and pool:
        fitting = [d for d in pool if view.slots(d) >= remaining]
        if fitting:
            best = min(fitting, key=lambda d: (view.slots(d), topo.domains[d].name))
            chosen.append((best, remaining))
            return chosen
        head = pool.pop(0)
        chosen.append((head, view.slots(head)))
        remaining -= view.slots(head)
    return chosen if remaining <= 0 else []


def _fit_level(gang: Gang, topo: ClusterTopology, view: SlotView) -> tuple[int, list[tuple[int, int]]] | str:
    """(level, chosen domains with counts) per Kueue's findLevelWithFitDomains, or a reason."""
    required, preferred = constraint_levels(gang, topo)
    pods = len(gang.pods)
    level = required if required is not None else preferred if preferred is not None else topo.host_level
    while True:
        at_level = [d.id for d in topo.domains if d.level == level]
        fitting = [d for d in at_level if view.slots(d) >= pods]
        if fitting:
            best = min(fitting, key=lambda d: (view.slots(d), topo.domains[d].name))
            return level, [(best, pods)]
        if required is not None:
            return unschedulable_reason(gang, topo) or f"no {topo.levels[level].name} domain fits"
        if level == 0:
            chosen = _take_minimum(topo, view, at_level, pods)
            return (level, chosen) if chosen else (unschedulable_reason(gang, topo) or "does not fit")
        level -= 1


class KueueTasPolicy:
    """Kueue TAS BestFit: fewest, tightest domains at the requested level; pods in index order."""

    name = NAME

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Choose host counts level by level as Kueue does, then fill them in rank order."""
        view = slot_view(gang, topo)
        if view.total < len(gang.pods):
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "does not fit")
        try:
            found = _fit_level(gang, topo, view)
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        if isinstance(found, str):
            return Assignment.unschedulable(found)
        level, chosen = found
        while level < topo.host_level:
            children = [c for d, _ in chosen for c in topo.domains[d].children]
            chosen = _take_minimum(topo, view, children, sum(n for _, n in chosen))
            level += 1
        hosts = sorted(chosen, key=lambda item: tuple(topo.domains[d].name for d in
                                                      topo.nodes[topo.domains[item[0]].nodes[0]].path))
        pod_nodes: list[int] = []
        for host, count in hosts:
            pod_nodes.extend([topo.domains[host].nodes[0]] * count)
        return Assignment(tuple(pod_nodes))


def factory(**_options: object) -> KueueTasPolicy:
    """Build the policy (it takes no options)."""
    return KueueTasPolicy()
