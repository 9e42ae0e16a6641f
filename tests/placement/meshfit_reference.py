"""Reference copy of the `meshfit` policy as it was before the speed work of issue 21 (tests only).

It fills and prices every candidate with the original code (`meshfit_reference_search`, one `LayoutPricer`
call per layout, no floors); `test_search_equivalence.py` checks the optimised policy decides the same.
The original module documentation follows.

`meshfit`: the default policy — smallest fitting domains, cost-model-chosen layout, then least fragmentation.

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

from dataclasses import dataclass

import numpy as np

from tests.placement.meshfit_reference_search import (
    BALANCE, PACK, ROOT, SPREAD, SlotView, candidate_domains, fill_domain, pod_axis_grid, pod_sequence, slot_view,
    virtual_orders,
)
from plugins.policies.kueue_slices import assign_slices
from scheduler.placement.capacity import constraint_levels, slice_level
from scheduler.placement.cost import LayoutPricer, lower_bound_seconds
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import AUTO_RANK_ORDER, Gang
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError

NAME = "meshfit-reference"
RELATIVE_TIE = 1e-9
"""Costs closer than this (relative) are equal; fragmentation decides."""


@dataclass(frozen=True)
class Candidate:
    """One priced layout: pod -> node, its rank order, cost and fragmentation tie-breakers."""

    pod_nodes: tuple[int, ...]
    rank_order: str
    cost: float
    tie_break: tuple[int, int, int]

    def beats(self, other: "Candidate | None") -> bool:
        """True if this layout is cheaper, or as cheap and less fragmenting."""
        if other is None:
            return True
        if costs_differ(self.cost, other.cost):
            return self.cost < other.cost
        return self.tie_break < other.tie_break


def costs_differ(a: float, b: float) -> bool:
    """True when two predicted costs differ by more than the relative tie tolerance."""
    return abs(a - b) > RELATIVE_TIE * max(abs(a), abs(b), 1e-30)


def clearly_costlier(cost: float, best_cost: float) -> bool:
    """True when `cost` loses to `best_cost` whatever the tie-breakers say."""
    return cost > best_cost and costs_differ(cost, best_cost)


def whole_domains_broken(topo: ClusterTopology, view: SlotView, pod_nodes: np.ndarray) -> int:
    """How many fully free domains (hosts included) this layout starts using."""
    free = view.__dict__.get("_domain_free")
    if free is None:
        free = view.__dict__.setdefault("_domain_free", _domain_free(topo).tolist())
    total = _domain_total(topo)
    paths = view.tree.path_lists
    touched = {domain for node in set(pod_nodes.tolist()) for domain in paths[node]}
    return sum(1 for domain in touched if free[domain] == total[domain])


def _domain_total(topo: ClusterTopology) -> list[int]:
    cached = getattr(topo, "_meshfit_domain_total", None)
    if cached is None or len(cached) != len(topo.domains):
        cached = [d.gpus_total for d in topo.domains]
        topo._meshfit_domain_total = cached  # type: ignore[attr-defined]
    return cached


def _domain_free(topo: ClusterTopology) -> np.ndarray:
    return topo.free_arrays()[1]


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

    def __init__(self, per_level: int = 3, single_pod_shortcut: bool = True) -> None:
        self.per_level = per_level
        self.single_pod_shortcut = single_pod_shortcut
        """Answer one-pod gangs without the general search (same decisions; off only to test that)."""

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
                      slices: "SliceCheck | None" = None) -> Candidate | None:
        """Best layout of the gang inside one domain for one rank order (`plans`: sequence, blocks, strategy)."""
        pods = len(pricer.gang.pods)
        level = view.tree.level_of(domain)
        leftover = view.slots(domain) - pods
        for sequence, blocks, strategy in plans:
            pod_nodes = np.empty(pods, dtype=np.int64)
            pod_nodes[sequence] = fill_domain(view, domain, pods, blocks, strategy)
            if slices is not None and not slices.kept(pod_nodes):
                continue
            cost = pricer.step_seconds(pod_nodes)
            if best is not None and clearly_costlier(cost, best.cost):
                continue  # cannot win even on tie-breaks: skip pricing its fragmentation
            tie = (whole_domains_broken(topo, view, pod_nodes), -level, leftover)
            candidate = Candidate(tuple(int(n) for n in pod_nodes), order, cost, tie)
            if candidate.beats(best):
                best = candidate
        return best

    def _single_pod(self, gang: Gang, topo: ClusterTopology, view: SlotView, order: str,
                    floor: float) -> Assignment | None:
        """The general search's answer for a one-pod gang, without re-pricing identical layouts.

        A single pod sits on one node whatever the domain or rank order, so every host-level candidate
        costs the same and the first rank order wins ties; the host level is searched first and, when
        that cost reaches the lower bound, last.  Returns None when it does not (unusual link tiers):
        the general search then decides."""
        tree = view.tree
        hosts = candidate_domains(view, 1, tree.levels - 1, self.per_level)  # what the search visits first
        if not hosts:
            return None
        cost = LayoutPricer(gang, topo, order).price([tree.host_node[hosts[0]]])[0]
        if cost > floor:
            return None
        best, best_tie = hosts[0], None
        for domain in hosts:
            node = np.array([tree.host_node[domain]], dtype=np.int64)
            tie = (whole_domains_broken(topo, view, node), view.slots(domain) - 1)
            if best_tie is None or tie < best_tie:
                best, best_tie = domain, tie
        return Assignment((tree.host_node[best],), None, order)

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Choose nodes and pod order for the whole gang, or say why it cannot fit."""
        view = slot_view(gang, topo)
        orders = SUPPORTED_RANK_ORDERS if gang.rank_order == AUTO_RANK_ORDER else (gang.rank_order,)
        floor = lower_bound_seconds(gang, topo) * (1 + RELATIVE_TIE)
        try:
            if len(gang.pods) == 1 and self.single_pod_shortcut and not gang.constraint.has_slices:
                constraint_levels(gang, topo)  # the same errors as the search's candidate domains
                single = self._single_pod(gang, topo, view, orders[0], floor)
                if single is not None:
                    return single
            domains = self._candidates(gang, topo, view)
            slices = SliceCheck(gang, topo) if gang.constraint.has_slices else None
            kueue = assign_slices(gang, topo, view.domain_slots) if slices is not None else None
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        if not domains:
            return Assignment.unschedulable(unschedulable_reason(gang, topo) or "no domain can hold the gang")
        if isinstance(kueue, str):
            return Assignment.unschedulable(kueue)  # Kueue's slice placement fails only when no layout keeps the slices
        best: Candidate | None = None
        pricers = [LayoutPricer(gang, topo, order) for order in orders]
        strategies = (PACK, BALANCE, SPREAD) if view.tree.oversubscribed else (PACK,)
        plans = [[(sequence, blocks, strategy) for sequence, blocks in layout_plans(gang, order, plan_weights(pricer))
                  for strategy in strategies] for pricer, order in zip(pricers, orders)]
        for level in sorted({view.tree.level_of(d) for d in domains}, reverse=True):
            for domain in (d for d in domains if view.tree.level_of(d) == level):
                for pricer, order, order_plans in zip(pricers, orders, plans):
                    best = self._price_domain(topo, view, domain, pricer, order, order_plans, best, slices)
            if best is not None and best.cost <= floor:
                break
        if kueue is not None:
            best = _with_kueue_layout(topo, view, pricers, orders, np.array(kueue, dtype=np.int64), best)
        assert best is not None
        return Assignment(best.pod_nodes, None, best.rank_order)


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
    tie = (whole_domains_broken(topo, view, pod_nodes), -view.tree.level_of(domain), view.slots(domain) - len(pod_nodes))
    for pricer, order in zip(pricers, orders):
        candidate = Candidate(tuple(int(n) for n in pod_nodes), order, pricer.step_seconds(pod_nodes), tie)
        if candidate.beats(best):
            best = candidate
    assert best is not None
    return best


def plan_weights(pricer: LayoutPricer) -> dict[str, float]:
    """Bytes per step of each axis: heavier axes are nested innermost first among the layouts tried."""
    return {axis: t.bytes_per_call * t.calls_per_step for axis, t in pricer.traffic.items()}


def factory(per_level: int = 3, **_options: object) -> MeshfitPolicy:
    """Build the policy; `per_level` bounds the candidate domains priced per level."""
    return MeshfitPolicy(per_level=per_level)
