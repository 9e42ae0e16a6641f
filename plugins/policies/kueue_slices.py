"""Kueue two-level Topology Aware Scheduling (podset slices), BestFit profile, as published.

Kueue v0.13 added `kueue.x-k8s.io/podset-slice-required-topology` + `kueue.x-k8s.io/podset-slice-size`
(KEP-2724 "Two-level Topology Aware scheduling"; `pkg/cache/.../tas_flavor_snapshot.go`): the pod
set is cut into slices of `size` consecutive pods and each slice must sit inside one domain of the
slice level, while the whole pod set honours its podset level (required / preferred; a slice-only
request is unconstrained from the top level).  The algorithm, without leader pods:

1. Phase 1: per domain, free pods (`state`) and whole slices (`sliceState`): `state // size` at the
   slice level, the sum of the children's slices above it, 0 below it.
2. Find the level: domains sorted by (slices descending, free pods ascending, name); the first one
   with the fewest slices that still holds all of them (BestFit).  None: required -> unschedulable,
   preferred -> one level up; at the top, take domains in that order and give the rest to the
   tightest domain that holds it.
3. Down to the slice level: pool the chosen domains' children, sort them the same way, take whole
   slices greedily with a BestFit last domain.
4. From the slice level down: inside each chosen domain separately, give its pods to its children
   sorted by (slices = 0 for all, so) free pods *ascending*, then name; the first child that holds
   the rest takes it.
5. Pods fill the chosen hosts in index order, hosts sorted by their topology names outermost first;
   every slice-level domain holds a multiple of `size` pods, so every slice stays inside one.
"""

from __future__ import annotations

import numpy as np

from plugins.policies.ordering import TopologyOrder, topology_order
from scheduler.placement.capacity import constraint_levels, slice_level
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import Gang
from topology.model import ClusterTopology

Chosen = list[tuple[int, int]]
"""(domain id, slices or pods) pairs."""


def slice_counts(order: TopologyOrder, slots: np.ndarray, level: int, size: int) -> np.ndarray:
    """Kueue's sliceState per domain: whole slices at the slice level, summed upwards, 0 below it."""
    counts = np.zeros_like(slots)
    at_level = order.at_level[level]
    counts[at_level] = slots[at_level] // size
    for upper in range(level - 1, -1, -1):
        child = order.at_level[upper + 1]
        counts += np.bincount(order.parent[child], weights=counts[child], minlength=counts.size).astype(np.int64)
    return counts


def ranked(order: TopologyOrder, slices: np.ndarray, slots: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """`candidates` in Kueue's BestFit order: most slices first, then fewest free pods, then by name (stable)."""
    return candidates[np.lexsort((order.domain_rank[candidates], slots[candidates], -slices[candidates]))]


def best_fit_index(values: np.ndarray, need: int) -> int | None:
    """First index holding the smallest value >= `need` (Kueue's findBestFitDomainBy), None if none fits."""
    fits = values >= need
    if not fits.any():
        return None
    return int(np.flatnonzero(values == values[fits].min())[0])


def take_slices(order: TopologyOrder, slices: np.ndarray, slots: np.ndarray, candidates: np.ndarray,
                count: int) -> Chosen:
    """Whole slices from ranked candidates until one holds the rest, which the tightest fit takes; [] if short."""
    ordered = ranked(order, slices, slots, candidates)
    held = slices[ordered]
    running = np.cumsum(held)
    stop = int(np.searchsorted(running, count, side="left"))
    if stop == ordered.size:
        return []
    remaining = count - (int(running[stop - 1]) if stop else 0)
    last = stop + (best_fit_index(held[stop:], remaining) or 0)
    return [*zip(ordered[:stop].tolist(), held[:stop].tolist()), (int(ordered[last]), remaining)]


def fill_smallest_first(order: TopologyOrder, slots: np.ndarray, children: np.ndarray, pods: int) -> Chosen:
    """Kueue below the slice level: children by free pods ascending, then name; the first that holds the rest takes it."""
    ordered = children[np.lexsort((order.domain_rank[children], slots[children]))]
    held = slots[ordered]
    stop = min(int(np.searchsorted(np.cumsum(held), pods, side="left")), ordered.size - 1)
    takes = held[: stop + 1].copy()
    takes[stop] = pods - int(held[:stop].sum())
    return [(d, n) for d, n in zip(ordered[: stop + 1].tolist(), takes.tolist()) if n > 0]


def _fit(gang: Gang, topo: ClusterTopology, slots: np.ndarray, slices: np.ndarray,
         start: int, required: bool) -> tuple[int, Chosen] | str:
    """(level, chosen domains with slice counts) per Kueue's findLevelWithFitDomains, or a reason."""
    order = topology_order(topo)
    size = gang.constraint.slice_size or 1
    count = len(gang.pods) // size
    level = start
    while True:
        candidates = ranked(order, slices, slots, order.at_level[level])
        best = best_fit_index(slices[candidates], count)
        if best is not None:
            return level, [(int(candidates[best]), count)]
        if required or level == 0:
            break
        level -= 1
    chosen = [] if required else take_slices(order, slices, slots, order.at_level[0], count)
    if chosen:
        return 0, chosen
    where = f"one {topo.levels[start].name} domain" if required else "the cluster"
    best_held = int(slices[order.at_level[level]].max(initial=0)) if required else int(slices[order.at_level[0]].sum())
    return unschedulable_reason(gang, topo) or (
        f"{where} holds only {best_held} of {count} slices of {size} pods "
        f"(each slice inside one {gang.constraint.slice_required_level} domain)")


def _descend(order: TopologyOrder, slots: np.ndarray, slices: np.ndarray, level: int, slice_lvl: int,
             host_level: int, chosen: Chosen, size: int) -> Chosen:
    """Slices pooled down to the slice level, then each domain's pods split among its own children."""
    count = sum(n for _, n in chosen)
    while level < slice_lvl and chosen:
        children = np.concatenate([order.children[d] for d, _ in chosen])
        chosen = take_slices(order, slices, slots, children, count)
        level += 1
    pods = [(d, n * size) for d, n in chosen]
    while level < host_level:
        pods = [pair for d, n in pods for pair in fill_smallest_first(order, slots, order.children[d], n)]
        level += 1
    return pods


def _pods_by_topology(topo: ClusterTopology, order: TopologyOrder, hosts: Chosen) -> tuple[int, ...]:
    """Node per pod: hosts sorted by domain names outermost first (ids break name ties), filled in index order."""
    nodes = order.first_node[np.array([d for d, _ in hosts], dtype=np.int64)]
    counts = np.array([n for _, n in hosts], dtype=np.int64)
    paths = np.array([topo.nodes[n].path for n in nodes.tolist()], dtype=np.int64)
    names = order.path_rank[nodes]
    keys = np.stack([names, paths], axis=2).reshape(len(nodes), -1)
    sequence = np.lexsort(keys.T[::-1])
    return tuple(np.repeat(nodes[sequence], counts[sequence]).tolist())


def assign_slices(gang: Gang, topo: ClusterTopology, slots: np.ndarray) -> tuple[int, ...] | str:
    """Node per pod for a gang with Kueue slices (see module doc), or why it cannot be placed.

    `slots` holds free pods of this gang per domain; TopologyError if a level name is unknown.
    """
    order = topology_order(topo)
    required, preferred = constraint_levels(gang, topo)
    slice_lvl = slice_level(gang, topo)
    assert slice_lvl is not None
    start = required if required is not None else preferred if preferred is not None else 0
    if start > slice_lvl:
        return (f"podset slice topology {gang.constraint.slice_required_level} is above the podset topology "
                f"{topo.levels[start].name}")
    size = gang.constraint.slice_size or 1
    slices = slice_counts(order, slots, slice_lvl, size)
    found = _fit(gang, topo, slots, slices, start, required is not None)
    if isinstance(found, str):
        return found
    level, chosen = found
    hosts = _descend(order, slots, slices, level, slice_lvl, topo.host_level, chosen, size)
    return _pods_by_topology(topo, order, hosts)
