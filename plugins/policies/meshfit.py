"""`meshfit`: the default policy — smallest fitting domains, cost-model-chosen layout, then least fragmentation.

For every rank order allowed (all of `SUPPORTED_RANK_ORDERS` under `rank-order: auto`), every
candidate domain (deepest level first, best fits and the roomiest per level, honouring required /
preferred levels and pre-assigned domains) and every pod-level axis nesting, the hierarchical
aligned fill of `meshfit_search` proposes a layout; the cost model prices it.  The cheapest
layout wins; ties go to the layout breaking the fewest whole domains (NVLink domains, racks,
nodes), then to the deeper domain, then to the tightest fit.

Kueue slices (`podset-slice-required-topology` + `podset-slice-size`) are a hard constraint: a
layout that puts one slice's consecutive pods in two domains of the slice level is never chosen,
and Kueue's own two-level placement (`kueue_slices`) is priced as one more candidate, so meshfit
places every sliced gang that Kueue would place, never at a higher predicted cost.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from plugins.policies.kueue_slices import assign_slices
from plugins.policies.meshfit_candidates import (
    RELATIVE_TIE, Candidate, DomainFloors, clearly_costlier, costs_differ, domain_totals,
    whole_domains_broken,
)
from plugins.policies.meshfit_search import (
    BALANCE, PACK, ROOT, SPREAD, SlotView, candidate_domains, fill_domain, pod_axis_grid, pod_sequence, slot_view,
    virtual_orders,
)
from scheduler.placement.capacity import constraint_levels, slice_level
from scheduler.placement.cost import LayoutPricer
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import AUTO_RANK_ORDER, Gang
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS
from scheduler.placement.pricing import price_layouts, shared_pricer
from scheduler.placement.result import Assignment
from scheduler.placement.tree_index import tree_index
from topology.model import ClusterTopology, TopologyError

NAME = "meshfit"
__all__ = ["NAME", "RELATIVE_TIE", "Candidate", "MeshfitPolicy", "SliceCheck", "clearly_costlier", "costs_differ",
           "factory", "layout_plans", "plan_weights", "search_plans", "whole_domains_broken"]


def layout_plans(gang: Gang, rank_order: str, weights: dict[str, float]) -> list[tuple[np.ndarray, list[int]]]:
    """(pod fill sequence, block sizes) for each pod-level axis nesting worth trying."""
    pods = len(gang.pods)
    grid = pod_axis_grid(gang, rank_order)
    if not grid:
        return [(np.arange(pods), [1, pods])]
    return [pod_sequence(grid, nesting, pods) for nesting in virtual_orders(grid, weights)]


class MeshfitPolicy:
    """Topology- and parallelism-aware gang placement minimising predicted step communication time."""

    name = NAME

    def __init__(self, per_level: int = 3, single_pod_shortcut: bool = True, prune: bool = True) -> None:
        self.per_level = per_level
        self.single_pod_shortcut = single_pod_shortcut
        """Answer one-pod gangs without the general search (same decisions; off only to test that)."""
        self.prune = prune
        """Skip domains whose floors cannot beat the incumbent (same decisions; off only to test that)."""

    def _candidates(self, gang: Gang, topo: ClusterTopology, view: SlotView) -> list[int]:
        """Candidate domains honouring required (hard) and preferred (soft) levels."""
        required, preferred = constraint_levels(gang, topo)
        pods = len(gang.pods)
        domains = candidate_domains(view, pods, ROOT if required is None else required, self.per_level)
        if preferred is not None:
            inside = [d for d in domains if view.tree.level_of(d) >= preferred]
            domains = inside or domains
        return domains

    def _price_domain(self, topo: ClusterTopology, view: SlotView, domain: int, pricer: LayoutPricer, order: str,
                      plans: list[tuple[np.ndarray, list[int], str]], best: Candidate | None,
                      slices: "SliceCheck | None" = None, floors: DomainFloors | None = None) -> Candidate | None:
        """Best layout of the gang inside one domain for one rank order (`plans`: sequence, blocks, strategy):
        every plan filled, the new layouts priced in one call, then compared in plan order."""
        pods = len(plans[0][0])
        level = view.tree.level_of(domain)
        leftover = view.slots(domain) - pods
        layouts = domain_layouts(view, domain, plans, slices)
        taken: Candidate | None = None  # the best layout when it was found here: same level and leftover slots
        for pod_nodes, cost in zip(layouts, layout_costs(pricer, layouts)):
            if best is not None and clearly_costlier(cost, best.cost):
                continue  # cannot win even on tie-breaks: skip pricing its fragmentation
            nodes = tuple(pod_nodes.tolist())
            if taken is best and taken is not None and not costs_differ(cost, taken.cost) and \
                    set(nodes) == set(taken.pod_nodes):
                continue  # its nodes in another order: the same tie-breakers, so it cannot beat the best
            candidate = Candidate(nodes, order, cost, _tie_break(topo, view, floors, pod_nodes, level, leftover))
            if candidate.beats(best):
                best = taken = candidate
        return best

    def _single_pod(self, gang: Gang, topo: ClusterTopology, pricer: LayoutPricer, order: str,
                    floor: float) -> Assignment | None:
        """The general search's answer for a one-pod gang, without re-pricing identical layouts.

        A single pod sits on one node whatever the domain or rank order, so every host-level candidate
        costs the same and the first rank order wins ties; the host level is searched first and, when
        that cost reaches the lower bound, last.  Returns None when it does not (unusual link tiers):
        the general search then decides."""
        nodes, slots = self._host_candidates(gang, topo)
        if not nodes:
            return None
        if one_pod_seconds(pricer, nodes[0]) > floor:
            return None
        paths = tree_index(topo).path_lists
        free, total = topo.free_arrays()[1], domain_totals(topo)
        best, best_tie = nodes[0], None
        for node, node_slots in zip(nodes, slots):
            broken = 0  # fully free domains on the node's path: the host and up to the first domain in use
            for domain in reversed(paths[node]):
                if free[domain] != total[domain]:
                    break
                broken += 1
            tie = (broken, node_slots - 1)
            if best_tie is None or tie < best_tie:
                best, best_tie = node, tie
        return Assignment((best,), None, order)

    def _host_candidates(self, gang: Gang, topo: ClusterTopology) -> tuple[list[int], list[int]]:
        """Nodes of the host-level candidate domains for one pod, in the order the search visits them, and
        their free pod slots (from the topology's by-free-GPUs host index unless the gang has assigned domains)."""
        gpus = max(gang.gpus_per_pod, 1)
        hosts = topo.hosts_by_free() if not gang.constraint.assigned_domains else None  # else: only assigned nodes
        if hosts is not None and hosts.one_node_per_host:
            fewest, roomiest = hosts.fewest_and_roomiest(gpus, max(self.per_level - 1, 0))
            nodes = list(dict.fromkeys(fewest + [roomiest])) if roomiest is not None else []
            free = topo.free_arrays()[0]
            return nodes, [int(free[node]) // gpus for node in nodes]
        view = slot_view(gang, topo)
        tree = view.tree
        nodes = [tree.host_node[d] for d in candidate_domains(view, 1, tree.levels - 1, self.per_level)]
        return nodes, [int(view.node_slots[node]) for node in nodes]

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Choose nodes and pod order for the whole gang, or say why it cannot fit."""
        orders = SUPPORTED_RANK_ORDERS if gang.rank_order == AUTO_RANK_ORDER else (gang.rank_order,)
        first = shared_pricer(gang, topo, orders[0])
        floor = first.lower_bound() * (1 + RELATIVE_TIE)
        try:
            if len(gang.pods) == 1 and self.single_pod_shortcut and not gang.constraint.has_slices:
                constraint_levels(gang, topo)  # the same errors as the search's candidate domains
                single = self._single_pod(gang, topo, first, orders[0], floor)
                if single is not None:
                    return single
            view = slot_view(gang, topo)
            domains = self._candidates(gang, topo, view)
            slices = SliceCheck(gang, topo) if gang.constraint.has_slices else None
            kueue = assign_slices(gang, topo, view.domain_slots) if slices is not None else None
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        if not domains:
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "no domain can hold the gang")
        if isinstance(kueue, str):
            return Assignment.unschedulable(kueue)  # Kueue's slice placement fails only when no layout keeps the slices
        pricers = [first] + [shared_pricer(gang, topo, order) for order in orders[1:]]
        best = self._search(gang, topo, view, domains, pricers, orders, floor, slices)
        if kueue is not None:
            best = _with_kueue_layout(topo, view, pricers, orders, np.array(kueue, dtype=np.int64), best)
        assert best is not None
        return Assignment(best.pod_nodes, None, best.rank_order)

    def _search(self, gang: Gang, topo: ClusterTopology, view: SlotView, domains: list[int],
                pricers: list[LayoutPricer], orders: tuple[str, ...], floor: float,
                slices: "SliceCheck | None") -> Candidate | None:
        """The cheapest layout over candidate domains (deepest level first) x rank orders x plans.

        Once a first candidate is known, the steps of each level its floors do not rule out are filled and priced in
        one call per rank order as the level is reached (the prices are remembered: a level's domains are ruled out
        against the best of the deeper levels, not the first one); each step is then decided in order exactly as
        without."""
        strategies = (PACK, BALANCE, SPREAD) if view.tree.oversubscribed else (PACK,)
        plans = [search_plans(gang, pricer, order, strategies) for pricer, order in zip(pricers, orders)]
        floors = DomainFloors(topo, view, len(gang.pods))
        levels = sorted({view.tree.level_of(d) for d in domains}, reverse=True)
        steps = [(level, domain, pricer, order, order_plans) for level in levels
                 for domain in domains if view.tree.level_of(domain) == level
                 for pricer, order, order_plans in zip(pricers, orders, plans)]
        best: Candidate | None = None
        prefetched = None
        if self.prune and steps:
            self._prefetch_first(view, steps, floors, slices)
        for position, (level, domain, pricer, order, order_plans) in enumerate(steps):
            if best is not None and best.cost <= floor and level != steps[position - 1][0]:
                break  # the previous level reached the lower bound
            if self.prune and floors.rules_out(pricer, domain, best):
                continue
            if best is not None and prefetched != level:
                prefetched = level
                self._prefetch(view, [step for step in steps[position:] if step[0] == level], floors, best, slices)
            best = self._price_domain(topo, view, domain, pricer, order, order_plans, best, slices, floors)
        return best

    def _prefetch(self, view: SlotView, steps: list, floors: DomainFloors, best: Candidate,
                  slices: "SliceCheck | None") -> None:
        """Fill the layouts of `steps` (one level's) that the floors do not rule out now and price them, one call
        per pricer."""
        _fill_and_price(view, [step for step in steps if not (self.prune and floors.rules_out(step[2], step[1], best))],
                        slices)

    @staticmethod
    def _prefetch_first(view: SlotView, steps: list, floors: DomainFloors, slices: "SliceCheck | None") -> None:
        """Fill and price together the first step and the steps of its level whose floors are clearly below the first
        step's: every layout of the first step costs at least its floor, so none of them can rule those steps out and
        the level's prefetch would fill them anyway (this saves it a pricing call of its own)."""
        level, first_domain, first_pricer = steps[0][:3]
        first = floors.domain_cost(first_pricer, first_domain)
        sure = [steps[0]]
        for step in steps[1:]:
            if step[0] != level:
                break
            if _clearly_below(floors.cost(step[2], step[1]), first) and \
                    _clearly_below(floors.domain_cost(step[2], step[1]), first):
                sure.append(step)
        if len(sure) > 1:
            _fill_and_price(view, sure, slices)


def _clearly_below(cost: float, other: float) -> bool:
    """True when `cost` is lower than `other` by more than the tie tolerance."""
    return cost < other and costs_differ(cost, other)


def _fill_and_price(view: SlotView, steps: list, slices: "SliceCheck | None") -> None:
    """Fill the layouts of `steps` and price the new ones, one call per pricer (the prices are remembered)."""
    by_pricer: dict[int, tuple[LayoutPricer, list[np.ndarray]]] = {}
    for _, domain, pricer, _, order_plans in steps:
        by_pricer.setdefault(id(pricer), (pricer, []))[1].extend(domain_layouts(view, domain, order_plans, slices))
    for pricer, layouts in by_pricer.values():
        layout_costs(pricer, layouts)


def _tie_break(topo: ClusterTopology, view: SlotView, floors: DomainFloors | None, pod_nodes: np.ndarray, level: int,
               leftover: int) -> Callable[[], tuple[int, int, int]]:
    """The tie-breakers of a layout filled in a domain of `level` keeping `leftover` slots, worked out when asked."""
    def tie() -> tuple[int, int, int]:
        broken = floors.layout_broken(pod_nodes) if floors is not None else \
            whole_domains_broken(topo, view.tree.path_lists, pod_nodes)
        return broken, -level, leftover
    return tie


def domain_layouts(view: SlotView, domain: int, plans: list[tuple[np.ndarray, list[int], str]],
                   slices: "SliceCheck | None") -> list[np.ndarray]:
    """The layout (node per pod) of every plan inside `domain`, except those splitting a Kueue slice: remembered
    per view (read-only arrays), since the prefetch and the search both ask for them."""
    cache = view.__dict__.setdefault("_domain_layouts", {})
    key = (domain, id(plans), id(slices))
    found = cache.get(key)
    if found is None:
        pods = len(plans[0][0])
        layouts = []
        for sequence, blocks, strategy in plans:
            pod_nodes = np.empty(pods, dtype=np.int64)
            pod_nodes[sequence] = fill_domain(view, domain, pods, blocks, strategy)
            if slices is None or slices.kept(pod_nodes):
                layouts.append(pod_nodes)
        found = cache[key] = (layouts, plans, slices)  # the plans and slices kept alive: their ids stay theirs
    return found[0]


def layout_costs(pricer: LayoutPricer, layouts: list[np.ndarray]) -> list[float]:
    """Step seconds of each layout: remembered ones from the pricer's memo, the others priced in one call."""
    memo = pricer._memo
    keys = [layout.tobytes() for layout in layouts]
    fresh = list(dict.fromkeys(key for key in keys if key not in memo))
    if fresh:
        stack = np.frombuffer(b"".join(fresh), dtype=np.int64).reshape(len(fresh), -1)
        memo.update(zip(fresh, price_layouts(pricer, stack, fresh)))
    return [memo[key] for key in keys]


def one_pod_seconds(pricer: LayoutPricer, node: int) -> float:
    """Step seconds of a one-pod gang (the same on every node: all its groups sit inside the pod), cached."""
    seconds = pricer.__dict__.get("_one_pod_seconds")
    if seconds is None:
        seconds = pricer.__dict__["_one_pod_seconds"] = pricer.price([node])[0]
    return seconds


class SliceCheck:
    """Whether a layout keeps each Kueue slice (consecutive pods) inside one domain of the slice level."""

    def __init__(self, gang: Gang, topo: ClusterTopology) -> None:
        level = slice_level(gang, topo)
        assert level is not None
        self.domain_of = np.array([node.path[level] for node in topo.nodes], dtype=np.int64)
        self.size = gang.constraint.slice_size or 1

    def kept(self, pod_nodes: np.ndarray) -> bool:
        """True if every slice's pods share one slice-level domain."""
        domains = self.domain_of[pod_nodes].reshape(-1, self.size)
        return bool((domains == domains[:, :1]).all())


def _with_kueue_layout(topo: ClusterTopology, view: SlotView, pricers: list[LayoutPricer], orders: tuple[str, ...],
                       pod_nodes: np.ndarray, best: Candidate | None) -> Candidate:
    """`best`, or Kueue's slice layout under the cheapest rank order if that beats it."""
    paths = view.tree.paths[pod_nodes]
    common = np.flatnonzero((paths == paths[:1]).all(axis=0))  # levels whose domain holds every pod
    domain = int(paths[0, common[-1]]) if common.size else ROOT
    tie = (whole_domains_broken(topo, view.tree.path_lists, pod_nodes), -view.tree.level_of(domain),
           view.slots(domain) - len(pod_nodes))
    for pricer, order in zip(pricers, orders):
        candidate = Candidate(tuple(int(n) for n in pod_nodes), order, pricer.step_seconds(pod_nodes), tie)
        if candidate.beats(best):
            best = candidate
    assert best is not None
    return best


def search_plans(gang: Gang, pricer: LayoutPricer, order: str,
                 strategies: tuple[str, ...]) -> list[tuple[np.ndarray, list[int], str]]:
    """(pod sequence, blocks, strategy) of every layout tried per domain, cached on the shared pricer of the shape."""
    cache = pricer.__dict__.setdefault("_search_plans", {})
    if strategies not in cache:
        cache[strategies] = [(sequence, tuple(blocks), strategy)
                             for sequence, blocks in layout_plans(gang, order, plan_weights(pricer))
                             for strategy in strategies]
    return cache[strategies]


def plan_weights(pricer: LayoutPricer) -> dict[str, float]:
    """Bytes per step of each axis: heavier axes are nested innermost first among the layouts tried."""
    return {axis: t.bytes_per_call * t.calls_per_step for axis, t in pricer.traffic.items()}


def factory(per_level: int = 3, **_options: object) -> MeshfitPolicy:
    """Build the policy; `per_level` bounds the candidate domains priced per level."""
    return MeshfitPolicy(per_level=per_level)
