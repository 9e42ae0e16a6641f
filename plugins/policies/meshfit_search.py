"""Building blocks of the `meshfit` policy: free pod slots per domain, the pod-level axis grid,
candidate pod sequences, and an alignment-aware hierarchical fill of one domain.

The idea: the ranks of a gang form a grid of axes (rank order, innermost first); pods hold
contiguous rank blocks, so above the pod the grid is a smaller grid of "pod-level" axes.  Any
nesting order of those pod-level axes gives a pod *sequence* whose contiguous runs are whole
groups of the inner axes.  Filling a domain's children with runs that are multiples of the
largest possible group block keeps those groups inside one child, so the heaviest axes stay on
the fastest tier.  Which nesting order and which domain win is decided by the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np

from scheduler.capacity import allowed_nodes
from scheduler.jobs import Gang, parse_rank_order
from topology.model import ClusterTopology

ROOT = -1
"""Pseudo-domain id of the whole cluster (its children are the top-level domains)."""

MAX_VIRTUAL_ORDERS = 6
"""At most this many pod-level axis nestings are priced per rank order."""


class TreeIndex:
    """Static tree structure of a topology as plain lists and numpy arrays (cached per topology)."""

    def __init__(self, topo: ClusterTopology) -> None:
        self.levels = len(topo.levels)
        self.paths = np.array([n.path for n in topo.nodes], dtype=np.int64).reshape(len(topo.nodes), self.levels)
        self.domain_level = np.array([d.level for d in topo.domains], dtype=np.int64)
        self.children: list[list[int]] = [list(d.children) for d in topo.domains]
        self.root_children = [d.id for d in topo.domains if d.parent is None]
        self.host_node = {d.id: d.nodes[0] for d in topo.domains if d.level == self.levels - 1}
        self.size = (len(topo.nodes), len(topo.domains))

    def kids(self, domain: int) -> list[int]:
        """Children of a domain, or the top-level domains for ROOT."""
        return self.root_children if domain == ROOT else self.children[domain]

    def level_of(self, domain: int) -> int:
        """Level of a domain (-1 for ROOT)."""
        return ROOT if domain == ROOT else int(self.domain_level[domain])


def tree_index(topo: ClusterTopology) -> TreeIndex:
    """The cached `TreeIndex` of `topo` (rebuilt if nodes or domains changed)."""
    cached = getattr(topo, "_meshfit_tree", None)
    if cached is None or cached.size != (len(topo.nodes), len(topo.domains)):
        cached = TreeIndex(topo)
        topo._meshfit_tree = cached  # type: ignore[attr-defined]
    return cached


@dataclass
class SlotView:
    """How many pods of this gang fit on every node and in every domain right now."""

    tree: TreeIndex
    node_slots: np.ndarray
    node_free: np.ndarray
    domain_slots: np.ndarray
    total: int

    def slots(self, domain: int) -> int:
        """Pods that fit in `domain` (ROOT = the cluster)."""
        return self.total if domain == ROOT else int(self.domain_slots[domain])


def slot_view(gang: Gang, topo: ClusterTopology) -> SlotView:
    """Free pod slots per node and per domain for `gang`, honouring its pre-assigned domains."""
    tree = tree_index(topo)
    free = np.fromiter((n.gpus_free for n in topo.nodes), dtype=np.int64, count=len(topo.nodes))
    slots = free // max(gang.gpus_per_pod, 1)
    allowed = allowed_nodes(gang, topo)
    if allowed is not None:
        mask = np.zeros(len(topo.nodes), dtype=bool)
        mask[list(allowed)] = True
        slots = np.where(mask, slots, 0)
    weights = np.repeat(slots, tree.levels).astype(np.float64)
    domain_slots = np.bincount(tree.paths.ravel(), weights=weights, minlength=len(topo.domains)).astype(np.int64)
    return SlotView(tree, slots, free, domain_slots, int(slots.sum()))


def pod_axis_grid(gang: Gang, rank_order: str) -> list[tuple[str, int]] | None:
    """Pod-level axes (name, degree) innermost first, or None if pods do not split the rank grid cleanly."""
    inside = gang.gpus_per_pod
    grid: list[tuple[str, int]] = []
    for axis in parse_rank_order(rank_order):
        degree = gang.parallelism.degree(axis)
        if inside == 1:
            grid.append((axis, degree))
        elif inside % degree == 0:
            inside //= degree
        elif degree % inside == 0:
            grid.append((axis, degree // inside))
            inside = 1
        else:
            return None
    return [(axis, d) for axis, d in grid if d > 1]


def virtual_orders(grid: list[tuple[str, int]], weight: dict[str, float]) -> list[tuple[int, ...]]:
    """Nestings (permutations of grid positions) to try: identity, heaviest-innermost, then others."""
    k = len(grid)
    identity = tuple(range(k))
    heaviest = tuple(sorted(range(k), key=lambda i: (-weight.get(grid[i][0], 0.0), i)))
    orders = [identity]
    for candidate in [heaviest, *permutations(range(k))]:
        if candidate not in orders:
            orders.append(candidate)
        if len(orders) >= MAX_VIRTUAL_ORDERS:
            break
    return orders


def pod_sequence(grid: list[tuple[str, int]], nesting: tuple[int, ...], pods: int) -> tuple[np.ndarray, list[int]]:
    """(pod indices in fill order, block sizes in pods) for one nesting of the pod-level grid."""
    index = np.arange(pods, dtype=np.int64)
    strides, stride = [], 1
    for _, degree in grid:
        strides.append(stride)
        stride *= degree
    key = np.zeros(pods, dtype=np.int64)
    blocks, block = [1], 1
    for position in nesting:
        degree = grid[position][1]
        coord = (index // strides[position]) % degree
        key += coord * block
        block *= degree
        blocks.append(block)
    return np.argsort(key, kind="stable"), blocks


def _choose_children(kids: list[int], caps: list[int], leftovers: list[int], need: int) -> list[tuple[int, int]]:
    """Fewest children covering `need` blocks: largest first, the last one best-fit; (child, blocks)."""
    available = set(range(len(kids)))
    chosen: list[tuple[int, int]] = []
    remaining = need
    while remaining > 0:
        fits = [j for j in available if caps[j] >= remaining]
        if fits:
            best = min(fits, key=lambda j: (caps[j], leftovers[j], j))
            chosen.append((kids[best], remaining))
            return chosen
        largest = max(available, key=lambda j: (caps[j], -leftovers[j], -j), default=None)
        if largest is None or caps[largest] <= 0:
            raise ValueError("domain cannot hold the requested pods")
        chosen.append((kids[largest], caps[largest]))
        available.discard(largest)
        remaining -= caps[largest]
    return chosen


def fill_domain(view: SlotView, domain: int, pods: int, blocks: list[int]) -> list[int]:
    """Node index for each of `pods` consecutive sequence positions inside `domain`, aligned to blocks."""
    tree = view.tree
    if domain in tree.host_node:
        return [tree.host_node[domain]] * pods
    kids = [c for c in tree.kids(domain) if view.domain_slots[c] > 0]
    for block in sorted(blocks, reverse=True):
        if block > pods or pods % block:
            continue
        caps = [int(view.domain_slots[c]) // block for c in kids]
        if sum(caps) >= pods // block:
            break
    leftovers = [int(view.domain_slots[c]) - cap * block for c, cap in zip(kids, caps)]
    nodes: list[int] = []
    for child, count in _choose_children(kids, caps, leftovers, pods // block):
        nodes.extend(fill_domain(view, child, count * block, blocks))
    return nodes


def candidate_domains(view: SlotView, pods: int, min_level: int, per_level: int = 3) -> list[int]:
    """Domains that can hold `pods`, deepest level first: per level the best fits and the roomiest."""
    tree = view.tree
    found: list[int] = []
    for level in range(tree.levels - 1, min_level - 1, -1):
        if level == ROOT:
            if view.total >= pods:
                found.append(ROOT)
            continue
        ids = np.flatnonzero((tree.domain_level == level) & (view.domain_slots >= pods))
        if ids.size == 0:
            continue
        by_fit = ids[np.argsort(view.domain_slots[ids], kind="stable")]
        picks = list(by_fit[: per_level - 1]) + [by_fit[-1]]
        found.extend(dict.fromkeys(int(d) for d in picks))
    return found
