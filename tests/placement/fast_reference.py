"""Reference copies of the pre-numpy `kueue-tas`, `volcano-hypernode` and `first-fit` policies.

The policies were rewritten over numpy arrays for speed; these are the plain-Python versions they
replaced (kept verbatim in spirit, tests only) so `test_fast_policies.py` can check that every
decision stays identical.
"""

from __future__ import annotations

import heapq

from plugins.policies.meshfit_search import ROOT, SlotView, slot_view
from scheduler.placement.capacity import allowed_nodes, constraint_levels, pod_slots
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError


# ----- kueue-tas -------------------------------------------------------------------------------
def _sorted_desc(topo: ClusterTopology, view: SlotView, domains: list[int]) -> list[int]:
    return sorted(domains, key=lambda d: (-view.slots(d), topo.domains[d].name))


def _take_minimum(topo: ClusterTopology, view: SlotView, domains: list[int], count: int) -> list[tuple[int, int]]:
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


def kueue_tas_reference(gang: Gang, topo: ClusterTopology) -> Assignment:
    """The list-based Kueue TAS BestFit assignment (before the numpy rewrite)."""
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


# ----- volcano-hypernode -----------------------------------------------------------------------
def _utilisation(topo: ClusterTopology, domain: int) -> float:
    d = topo.domains[domain]
    return (d.gpus_total - d.gpus_free) / d.gpus_total if d.gpus_total else 0.0


def _binpack_nodes(gang: Gang, topo: ClusterTopology, view: SlotView, nodes: list[int]) -> list[int]:
    g = gang.gpus_per_pod
    heap = []
    for n in nodes:
        if view.node_slots[n] > 0:
            node = topo.nodes[n]
            heap.append((-(node.gpus_total - int(view.node_free[n]) + g) / node.gpus_total, node.name, n,
                         int(view.node_slots[n]), int(view.node_free[n])))
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
    fitting = [d.id for d in topo.domains if d.level == level and view.slots(d.id) >= pods]
    if not fitting:
        return None
    return min(fitting, key=lambda d: (-_utilisation(topo, d), topo.domains[d].name))


def volcano_reference(gang: Gang, topo: ClusterTopology) -> Assignment:
    """The list-based Volcano HyperNode gradient search + binpack (before the numpy rewrite)."""
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
    members = list(range(len(topo.nodes))) if chosen == ROOT else topo.domains[chosen].nodes
    return Assignment(tuple(_binpack_nodes(gang, topo, view, members)))


# ----- first-fit -------------------------------------------------------------------------------
def first_fit_reference(gang: Gang, topo: ClusterTopology) -> Assignment:
    """The list-based first-fit (nodes in name order, each filled before the next)."""
    slots = pod_slots(topo, gang.gpus_per_pod, allowed_nodes(gang, topo))
    chosen: list[int] = []
    for node in sorted(topo.nodes, key=lambda n: n.name):
        take = min(slots[node.index], len(gang.pods) - len(chosen))
        chosen.extend([node.index] * take)
        if len(chosen) == len(gang.pods):
            return Assignment(tuple(chosen))
    return Assignment.unschedulable(
        f"needs {len(gang.pods)} pods x {gang.gpus_per_pod} GPUs; only {len(chosen)} such pods fit")
