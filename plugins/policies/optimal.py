"""`optimal`: exact minimum predicted step time for small instances (branch and bound), refusing big ones.

Pods are assigned in index order.  Symmetry: an untouched subtree is entered only through one
representative among identical untouched siblings (same shape, GPUs and free slots), which loses
no optimum because swapping such siblings changes no cost.  Bound: per axis, the widest tier its
partially placed groups already cross, priced contention-free (a valid lower bound: groups only
widen and contention only adds).  The incumbent starts from the `meshfit` answer; leaves are
priced with the real cost model (contention included).  Required levels are hard; preferred
levels are ignored (the optimum is the yardstick).  Above `max_pods` pods or `max_nodes`
candidate nodes the policy refuses; `last_proven` says whether the last answer is proven optimal
(False when the search budget ran out).
"""

from __future__ import annotations

import math

import numpy as np

from plugins.policies.meshfit_search import ROOT, slot_view
from scheduler.placement.capacity import constraint_levels
from scheduler.placement.cost import LayoutPricer, collective_seconds
from scheduler.placement.explain import unschedulable_reason
from scheduler.placement.jobs import AUTO_RANK_ORDER, Gang
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError

NAME = "optimal"


def _signatures(topo: ClusterTopology, slots: np.ndarray) -> list[tuple]:
    """Static shape signature of every domain subtree (GPUs, free slots, children's signatures)."""
    sig: list[tuple] = [()] * len(topo.domains)
    for domain in sorted(topo.domains, key=lambda d: -d.level):
        if not domain.children:
            node = domain.nodes[0]
            sig[domain.id] = ("h", topo.nodes[node].gpus_total, int(slots[node]))
        else:
            sig[domain.id] = ("d", domain.gpus_total, tuple(sorted(sig[c] for c in domain.children)))
    return sig


class _Search:
    """One branch-and-bound run for one rank order."""

    def __init__(self, gang: Gang, topo: ClusterTopology, order: str, budget: int, required: int | None) -> None:
        self.gang, self.topo, self.order, self.budget, self.required = gang, topo, order, budget, required
        self.view = slot_view(gang, topo)
        self.sig = _signatures(topo, self.view.node_slots)
        self.pricer = LayoutPricer(gang, topo, order)
        self.pods = len(gang.pods)
        self.assign = [-1] * self.pods
        self.remaining = [int(s) for s in self.view.node_slots]
        self.domain_used = [0] * len(topo.domains)
        self.expanded = 0
        self.best_cost, self.best = math.inf, None
        self._prepare_groups()

    def _prepare_groups(self) -> None:
        """Pod-level groups per axis and contention-free seconds per widest level."""
        g = self.gang.gpus_per_pod
        levels = len(self.topo.levels)
        self.axis_groups: list[list[list[int]]] = []
        self.pod_groups: list[list[list[int]]] = []
        self.tier_seconds: list[list[float]] = []
        for axis, groups in self.pricer.groups.items():
            pod_sets = sorted({tuple(sorted(set(int(r) // g for r in grp))) for grp in groups})
            by_pod: list[list[int]] = [[] for _ in range(self.pods)]
            for gid, members in enumerate(pod_sets):
                for p in members:
                    by_pod[p].append(gid)
            traffic = self.pricer.traffic[axis]
            n = groups.shape[1]
            raw = []
            for lvl in range(-1, levels):
                bw = min([self.topo.tier_link(x).bandwidth_gbps for x in range(lvl, levels - 1)] or
                         [self.topo.tier_link(levels - 1).bandwidth_gbps])
                raw.append(collective_seconds(traffic.collective, traffic.bytes_per_call, n, bw,
                                              self.topo.tier_link(lvl).latency_us) * traffic.calls_per_step)
            self.tier_seconds.append([min(raw[: i + 1]) for i in range(len(raw))])
            self.axis_groups.append([list(m) for m in pod_sets])
            self.pod_groups.append(by_pod)

    def _bound(self, upto: int) -> float:
        """Contention-free lower bound given pods 0..upto-1 placed."""
        total = 0.0
        for axis, groups in enumerate(self.axis_groups):
            widest = len(self.topo.levels) - 1
            for members in groups:
                placed = [self.assign[p] for p in members if p < upto]
                for other in placed[1:]:
                    widest = min(widest, self.topo.common_level(placed[0], other))
            total += self.tier_seconds[axis][widest + 1]
        return total

    def _candidates(self, domain: int) -> list[int]:
        """Nodes to try next: every touched node with room, one representative per untouched shape."""
        tree = self.view.tree
        if domain != ROOT and domain in tree.host_node:
            node = tree.host_node[domain]
            return [node] if self.remaining[node] > 0 else []
        out: list[int] = []
        seen_untouched: set[tuple] = set()
        for child in tree.kids(domain):
            if self.view.domain_slots[child] == 0:
                continue
            if self.domain_used[child] == 0:
                if self.sig[child] in seen_untouched:
                    continue
                seen_untouched.add(self.sig[child])
            out.extend(self._candidates(child))
        return out

    def _place(self, pod: int, node: int, delta: int) -> None:
        self.assign[pod] = node if delta > 0 else -1
        self.remaining[node] -= delta
        for d in self.topo.nodes[node].path:
            self.domain_used[d] += delta

    def _respects_required(self, pod: int, node: int) -> bool:
        return self.required is None or pod == 0 or self.topo.common_level(self.assign[0], node) >= self.required

    def run(self, pod: int = 0) -> None:
        """Depth-first branch and bound from pod `pod`."""
        if self.expanded >= self.budget:
            return
        self.expanded += 1
        if pod == self.pods:
            cost = self.pricer.price(self.assign)[0]
            if cost < self.best_cost * (1 - 1e-12):
                self.best_cost, self.best = cost, tuple(self.assign)
            return
        previous = self.assign[pod - 1] if pod else None
        options = self._candidates(ROOT)
        if previous is not None:
            options.sort(key=lambda n: -self.topo.common_level(previous, n))
        for node in options:
            if not self._respects_required(pod, node):
                continue
            self._place(pod, node, 1)
            if self._bound(pod + 1) < self.best_cost * (1 - 1e-12):
                self.run(pod + 1)
            self._place(pod, node, -1)


class OptimalPolicy:
    """Exact search for the layout with the least predicted step communication time (small instances)."""

    name = NAME

    def __init__(self, max_pods: int = 16, max_nodes: int = 16, budget: int = 200_000) -> None:
        self.max_pods, self.max_nodes, self.budget = max_pods, max_nodes, budget
        self.last_proven = True

    def instance_too_large(self, gang: Gang, topo: ClusterTopology) -> str | None:
        """Why this instance is past the exact search's size limits (None when it is not); `meshfit place`
        reports it as bad input (exit 2), not as an unschedulable gang."""
        view = slot_view(gang, topo)
        candidates = int(np.count_nonzero(view.node_slots))
        if len(gang.pods) > self.max_pods or candidates > self.max_nodes:
            return (f"optimal: instance too large ({len(gang.pods)} pods on {candidates} candidate nodes; "
                    f"limits {self.max_pods} pods, {self.max_nodes} nodes)")
        return None

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Search every rank order allowed; unschedulable if none fits or the instance is too big."""
        reason = unschedulable_reason(gang, topo) or self.instance_too_large(gang, topo)
        if reason:
            return Assignment.unschedulable(reason)
        try:
            required, _ = constraint_levels(gang, topo)
        except TopologyError as exc:
            return Assignment.unschedulable(f"topology constraint cannot be met: {exc}")
        from plugins.policies.meshfit import MeshfitPolicy

        seed = MeshfitPolicy().assign(gang, topo)
        orders = SUPPORTED_RANK_ORDERS if gang.rank_order == AUTO_RANK_ORDER else (gang.rank_order,)
        best: tuple[float, tuple[int, ...] | None, str] = (math.inf, None, orders[0])
        self.last_proven = True
        for order in orders:
            search = _Search(gang, topo, order, self.budget, required)
            if seed.pod_nodes is not None:
                search.best_cost, search.best = search.pricer.price(seed.pod_nodes)[0], seed.pod_nodes
            search.run()
            self.last_proven &= search.expanded < self.budget
            if search.best is not None and search.best_cost < best[0]:
                best = (search.best_cost, search.best, order)
        if best[1] is None:
            return Assignment.unschedulable("optimal: no layout satisfies the constraints")
        return Assignment(tuple(int(n) for n in best[1]), None, best[2])


def factory(max_pods: int = 16, max_nodes: int = 16, budget: int = 200_000, **_options: object) -> OptimalPolicy:
    """Build the policy with its size limits and search budget."""
    return OptimalPolicy(int(max_pods), int(max_nodes), int(budget))
