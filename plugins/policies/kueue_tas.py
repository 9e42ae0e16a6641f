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
A gang with Kueue slices (`podset-slice-required-topology` + `podset-slice-size`, Kueue v0.13+) goes
through Kueue's two-level algorithm instead (`kueue_slices`); gangs without slices never do.
"""

from __future__ import annotations

import numpy as np

from plugins.policies.kueue_slices import assign_slices
from plugins.policies.meshfit_search import slot_view
from plugins.policies.ordering import TopologyOrder, best_fit, topology_order
from scheduler.placement.capacity import constraint_levels
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError

NAME = "kueue-tas"

Chosen = list[tuple[int, int]]
"""(domain id, pods) pairs."""


def _take_minimum(order: TopologyOrder, slots: np.ndarray, domains: np.ndarray, count: int) -> Chosen:
    """Greedy most-free-first (ties by name) with a BestFit last domain: (domain, pods) pairs covering `count`.

    Taking the most-free domains one by one until a single remaining domain fits the rest stops at the
    first position whose running total of slots (in that order) reaches `count`."""
    if count <= 0:
        return []
    held = slots[domains]
    pool, pool_slots = domains[held > 0], held[held > 0]
    ranked = np.argsort(-pool_slots * order.rank_span + order.domain_rank[pool], kind="stable")
    pool, pool_slots = pool[ranked], pool_slots[ranked]
    stop = int(np.searchsorted(np.cumsum(pool_slots), count, side="left"))
    if stop == pool.size:
        return []
    remaining = count - int(pool_slots[:stop].sum())
    last = best_fit(order, slots, pool[stop:], remaining)
    return [*zip(pool[:stop].tolist(), pool_slots[:stop].tolist()), (last, remaining)]


def _fit_level(gang: Gang, topo: ClusterTopology, slots: np.ndarray) -> tuple[int, Chosen] | str:
    """(level, chosen domains with counts) per Kueue's findLevelWithFitDomains, or a reason."""
    required, preferred = constraint_levels(gang, topo)
    order = topology_order(topo)
    pods = len(gang.pods)
    level = required if required is not None else preferred if preferred is not None else topo.host_level
    while True:
        best = best_fit(order, slots, order.at_level[level], pods)
        if best is not None:
            return level, [(best, pods)]
        if required is not None:
            return unschedulable_reason(gang, topo) or f"no {topo.levels[level].name} domain fits"
        if level == 0:
            chosen = _take_minimum(order, slots, order.at_level[level], pods)
            return (level, chosen) if chosen else (unschedulable_reason(gang, topo) or "does not fit")
        level -= 1


def _descend(order: TopologyOrder, slots: np.ndarray, level: int, host_level: int, chosen: Chosen) -> Chosen:
    """Split the chosen domains' counts over their children, level by level down to the hosts."""
    while level < host_level and chosen:
        children = np.concatenate([order.children[d] for d, _ in chosen])
        chosen = _take_minimum(order, slots, children, sum(n for _, n in chosen))
        level += 1
    return chosen


def _rank_ordered_pods(order: TopologyOrder, hosts: Chosen) -> tuple[int, ...]:
    """Node per pod: hosts sorted by their domain names outermost first, each filled in index order."""
    if len(hosts) == 1:
        host, count = hosts[0]
        return (int(order.first_node[host]),) * count
    host_ids = np.array([d for d, _ in hosts], dtype=np.int64)
    counts = np.array([n for _, n in hosts], dtype=np.int64)
    nodes = order.first_node[host_ids]
    keys = order.path_rank[nodes]
    ranked = np.lexsort(keys.T[::-1])
    return tuple(np.repeat(nodes[ranked], counts[ranked]).tolist())


def _slice_assignment(gang: Gang, topo: ClusterTopology, slots: np.ndarray) -> Assignment:
    """Kueue's two-level (podset slice) algorithm (`kueue_slices`), as an Assignment."""
    found = assign_slices(gang, topo, slots)
    return Assignment.unschedulable(found) if isinstance(found, str) else Assignment(found)


class KueueTasPolicy:
    """Kueue TAS BestFit: fewest, tightest domains at the requested level; pods in index order."""

    name = NAME

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Choose host counts level by level as Kueue does, then fill them in rank order."""
        view = slot_view(gang, topo)
        if view.total < len(gang.pods):
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "does not fit")
        try:
            if gang.constraint.has_slices:
                return _slice_assignment(gang, topo, view.domain_slots)
            found = _fit_level(gang, topo, view.domain_slots)
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        if isinstance(found, str):
            return Assignment.unschedulable(found)
        level, chosen = found
        order = topology_order(topo)
        hosts = _descend(order, view.domain_slots, level, topo.host_level, chosen)
        return Assignment(_rank_ordered_pods(order, hosts))


def factory(**_options: object) -> KueueTasPolicy:
    """Build the policy (it takes no options)."""
    return KueueTasPolicy()
