"""Candidate layouts of the `meshfit` policy: how they compare, and floors that rule a domain out unfilled.

A candidate is a priced layout with its fragmentation tie-breakers (whole domains it starts using, the
negated level of the domain it was filled in, the slots that domain keeps free).  Before a domain is
filled, `DomainFloors` gives a floor for every candidate it could produce: a floor on the cost
(`pricing.floor_seconds`) and a floor on the tie-breakers (the level and leftover are exact; the whole
domains broken are at least the wholly free hosts its pods cannot avoid, plus the domain and its
ancestors when they are wholly free).  A domain whose floors cannot beat the incumbent is skipped: by
construction it could not have replaced it, so the search decides exactly as without the floors.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import numpy as np

from plugins.policies.meshfit_search import ROOT, SlotView
from scheduler.placement.cost import LayoutPricer
from scheduler.placement.pricing import floor_seconds
from topology.model import ClusterTopology

RELATIVE_TIE = 1e-9
"""Costs closer than this (relative) are equal; fragmentation decides."""


class Candidate:
    """One priced layout: pod -> node, its rank order, cost and fragmentation tie-breakers.

    The tie-breakers may be given as a function: they are then worked out only if a comparison needs them
    (most candidates are decided by cost alone)."""

    __slots__ = ("pod_nodes", "rank_order", "cost", "_tie_break")

    def __init__(self, pod_nodes: tuple[int, ...], rank_order: str, cost: float,
                 tie_break: tuple[int, int, int] | Callable[[], tuple[int, int, int]]) -> None:
        self.pod_nodes, self.rank_order, self.cost = pod_nodes, rank_order, cost
        self._tie_break = tie_break

    @property
    def tie_break(self) -> tuple[int, int, int]:
        """(whole domains broken, -level of the domain filled, slots it keeps free): smaller is better."""
        if callable(self._tie_break):
            self._tie_break = self._tie_break()
        return self._tie_break

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


def cannot_beat(cost_floor: float, tie_floor: Callable[[], tuple[int, int, int]], best: Candidate | None) -> bool:
    """True when no candidate costing at least `cost_floor` with tie-breakers at least `tie_floor()` beats `best`
    (the tie-breaker floor is only computed when the costs leave it to decide)."""
    if best is None:
        return False
    if clearly_costlier(cost_floor, best.cost):
        return True
    if cost_floor < best.cost and costs_differ(cost_floor, best.cost):
        return False  # it might be clearly cheaper
    return tie_floor() >= best.tie_break


def domain_totals(topo: ClusterTopology) -> np.ndarray:
    """GPUs per domain id (cached on the topology)."""
    cached = getattr(topo, "_meshfit_domain_totals", None)
    if cached is None or cached.shape[0] != len(topo.domains):
        cached = np.array([d.gpus_total for d in topo.domains], dtype=np.int64)
        topo._meshfit_domain_totals = cached  # type: ignore[attr-defined]
    return cached


def whole_domains_broken(topo: ClusterTopology, paths: list[list[int]], pod_nodes: np.ndarray | Iterable[int],
                         fully_free: Sequence[bool] | None = None) -> int:
    """How many fully free domains (hosts included) this layout starts using (`paths`: domain ids per node;
    `fully_free`: per domain id whether it is fully free, computed here when not given).

    A fully free domain has only fully free domains below it, so on each node's path the fully free domains
    are the host and the ancestors above it up to the first one in use: each path is walked upwards until
    then, or until a domain another node's walk already counted (it went on from there) or found in use."""
    if fully_free is None:
        fully_free = _FullyFree(topo)
    nodes = set(pod_nodes.tolist() if isinstance(pod_nodes, np.ndarray) else pod_nodes)
    counted: set[int] = set()
    in_use: set[int] = set()  # domains found in use: read once, however many nodes lie below them
    for node in nodes:
        for domain in reversed(paths[node]):
            if domain in counted or domain in in_use:
                break
            if not fully_free[domain]:
                in_use.add(domain)
                break
            counted.add(domain)
    return len(counted)


class _FullyFree:
    """Per domain id, whether none of its GPUs is in use, read domain by domain from the topology's domains (their
    free GPUs are kept incrementally): a placement asks about a few dozen domains, not all of them."""

    __slots__ = ("domains",)

    def __init__(self, topo: ClusterTopology) -> None:
        self.domains = topo.domains

    def __getitem__(self, domain: int) -> bool:
        found = self.domains[domain]
        return found.gpus_free == found.gpus_total


class DomainFloors:
    """Floors on the cost and tie-breakers of any layout of one gang inside a candidate domain."""

    def __init__(self, topo: ClusterTopology, view: SlotView, pods: int) -> None:
        self.topo, self.view, self.pods = topo, view, pods
        self.costs: dict[tuple[int, int], float] = {}
        self.domain_costs: dict[tuple[int, int], float] = {}
        self.ties: dict[int, tuple[int, int, int]] = {}
        self.ruled_out: dict[tuple[int, int, Candidate], bool] = {}
        """`rules_out` by (pricer id, domain, incumbent), the incumbent keyed by identity (and kept alive here)."""
        self.deepest: dict[int, int] = {}
        self.broken_by_layout: dict[frozenset[int], int] = {}
        self._fully_free: _FullyFree | None = None

    @property
    def fully_free(self) -> _FullyFree:
        """Per domain id, whether it is fully free (read domain by domain: a placement asks about a few dozen)."""
        if self._fully_free is None:
            self._fully_free = _FullyFree(self.topo)
        return self._fully_free

    def layout_broken(self, pod_nodes: np.ndarray) -> int:
        """`whole_domains_broken` of one layout, remembered per set of nodes for this placement (layouts of one
        domain often use the same nodes in another pod order)."""
        nodes = frozenset(pod_nodes.tolist())
        found = self.broken_by_layout.get(nodes)
        if found is None:
            found = self.broken_by_layout[nodes] = whole_domains_broken(self.topo, self.view.tree.path_lists,
                                                                        nodes, self.fully_free)
        return found

    def deepest_level_holding(self, pods: int) -> int:
        """The deepest level with a domain that has room for `pods` of the gang's pods (-1: only the cluster)."""
        found = self.deepest.get(pods)
        if found is None:
            found = ROOT
            for level in range(self.view.tree.levels - 1, -1, -1):
                if self.view.may_hold_at(level, pods):
                    found = level
                    break
            self.deepest[pods] = found
        return found

    def cost(self, pricer: LayoutPricer, domain: int) -> float:
        """Floor on the step seconds of any layout inside `domain` under `pricer`'s rank order, the same for every
        domain of its level (each axis on the best tier some domain of the cluster has room for)."""
        level = self.view.tree.level_of(domain)
        key = (id(pricer), level)
        found = self.costs.get(key)
        if found is None:
            found = self.costs[key] = floor_seconds(pricer, level,
                                                    lambda members, _groups: self.deepest_level_holding(members))
        return found

    def domain_cost(self, pricer: LayoutPricer, domain: int) -> float:
        """A tighter floor than `cost` for one domain: each axis on the best tier whose domains inside `domain` have
        room for all its groups, and some axis no deeper than the deepest level with a domain holding every pod."""
        key = (id(pricer), domain)
        found = self.domain_costs.get(key)
        if found is None:
            level = self.view.tree.level_of(domain)
            fitting = _DeepestFitting(self, domain, level)
            found = self.domain_costs[key] = floor_seconds(pricer, level, fitting, fitting(self.pods, 1))
        return found

    def rules_out(self, pricer: LayoutPricer, domain: int, best: Candidate | None) -> bool:
        """True when no layout of the gang inside `domain` under `pricer` beats `best` (`cannot_beat` on the level's
        floor first, then on the domain's own when the level's does not decide)."""
        if best is None:
            return False
        key = (id(pricer), domain, best)  # the prefetch asks first, the search again with the same best
        found = self.ruled_out.get(key)
        if found is None:
            found = self.ruled_out[key] = (
                cannot_beat(self.cost(pricer, domain), lambda: self.tie(domain), best)
                or cannot_beat(self.domain_cost(pricer, domain), lambda: self.tie(domain), best))
        return found

    def tie(self, domain: int) -> tuple[int, int, int]:
        """Floor on the tie-breakers (whole domains broken, -level, leftover slots) of a layout inside `domain`."""
        found = self.ties.get(domain)
        if found is None:
            view = self.view
            level = view.tree.level_of(domain)
            found = self.ties[domain] = (self.broken(domain, level), -level, view.slots(domain) - self.pods)
        return found

    def broken(self, domain: int, level: int) -> int:
        """Whole domains any layout of the gang inside `domain` must start using (a lower bound): the domain and
        its ancestors when fully free, plus the fully free hosts needed for the pods that partly used hosts
        cannot take."""
        view = self.view
        ancestors = 0
        if domain != ROOT:
            fully_free = self.fully_free
            ancestors = sum(1 for d in view.tree.ancestors[domain, : level + 1].tolist() if fully_free[d])
        kept = view.kept
        if kept is None or level == view.tree.levels - 1 or kept.max_slots <= 0:
            return ancestors
        on_partial_hosts = 0
        if not kept.only_on_free_nodes:  # else every slot lies on a fully free node
            whole = kept.whole
            on_whole_hosts = int(whole[view.tree.root_children].sum()) if domain == ROOT else int(whole[domain])
            on_partial_hosts = view.slots(domain) - on_whole_hosts
        unavoidable = self.pods - on_partial_hosts
        return ancestors + (math.ceil(unavoidable / kept.max_slots) if unavoidable > 0 else 0)


class _DeepestFitting:
    """`floor_seconds`'s `deepest_fitting` for layouts inside one domain: the deepest level (at or below the
    domain's) whose domains inside it can hold `groups` disjoint groups of `members` pods, each inside one of them
    (searched from the deepest level where any domain of the cluster holds one group)."""

    def __init__(self, floors: DomainFloors, domain: int, level: int) -> None:
        self.floors, self.domain, self.level = floors, domain, level

    def __call__(self, members: int, groups: int) -> int:
        view = self.floors.view
        for level in range(self.floors.deepest_level_holding(members), self.level, -1):
            if view.holds_blocks(self.domain, members, level, groups):
                return level
        return self.level
