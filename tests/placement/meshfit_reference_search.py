"""Reference copy of the `meshfit` search building blocks as they were before the speed work of issue 21.

Tests only: `meshfit_reference` builds the policy from these so `test_search_equivalence.py` can check that the
optimised search (incremental slot arrays, cached aligned capacities, fast fills) decides exactly the same.
The original module documentation follows.

Building blocks of the `meshfit` policy: free pod slots per domain, the pod-level axis grid,
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

from scheduler.placement.capacity import allowed_nodes
from scheduler.placement.jobs import Gang, parse_rank_order
from scheduler.placement.tree_index import ROOT, TreeIndex, tree_index
from topology.model import ClusterTopology

MAX_VIRTUAL_ORDERS = 6
"""At most this many pod-level axis nestings are priced per rank order."""


@dataclass
class SlotView:
    """How many pods of this gang fit on every node and in every domain right now."""

    tree: TreeIndex
    node_slots: np.ndarray
    node_free: np.ndarray
    domain_slots: np.ndarray
    total: int

    @property
    def slot_list(self) -> list[int]:
        """`domain_slots` as a Python list (cheap per-domain lookups), built once per view."""
        cached = self.__dict__.get("_slot_list")
        if cached is None:
            cached = self.__dict__["_slot_list"] = self.domain_slots.tolist()
        return cached

    def slots(self, domain: int) -> int:
        """Pods that fit in `domain` (ROOT = the cluster)."""
        return self.total if domain == ROOT else self.slot_list[domain]

    def aligned_caps(self, block: int, base: np.ndarray | None = None, key: object = None) -> np.ndarray:
        """Per domain, how many whole blocks of `block` pods fit inside domains of the deepest level able to hold one.

        `base` (pods usable per domain, default the free slots) lets callers count only slots that keep
        smaller inner blocks aligned too; `key` names that base for the cache."""
        cache = self.__dict__.setdefault("_aligned", {})
        if (block, key) not in cache:
            tree = self.tree
            caps = (self.domain_slots if base is None else base) // block
            holders = np.flatnonzero(caps > 0)
            if holders.size:
                deepest = int(tree.domain_level[holders].max())
                at_level = np.flatnonzero(tree.domain_level == deepest)
                for level in range(deepest):
                    above = tree.domain_level == level
                    summed = np.bincount(tree.ancestors[at_level, level], weights=caps[at_level],
                                         minlength=caps.shape[0]).astype(np.int64)
                    caps = np.where(above, summed, caps)
            cache[(block, key)] = caps
        return cache[(block, key)]

    def nested_caps(self, blocks: tuple[int, ...]) -> np.ndarray:
        """Per domain, whole blocks of `blocks[-1]` pods that fit with every smaller block of `blocks` aligned as well."""
        caps = self.domain_slots
        for position, block in enumerate(blocks):
            base = caps if position == 0 else caps * blocks[position - 1]
            caps = self.aligned_caps(block, base, blocks[:position])
        return caps


def slot_view(gang: Gang, topo: ClusterTopology) -> SlotView:
    """Free pod slots per node and per domain for `gang`, honouring its pre-assigned domains."""
    tree = tree_index(topo)
    free = topo.free_arrays()[0]
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


PACK, BALANCE, SPREAD = "pack", "balance", "spread"
"""How blocks are split among a domain's children at the first real split: fewest children (pack),
fewest children evenly (balance), or as many children as possible (spread, relieves shared uplinks)."""


def _pack(caps: list[int], leftovers: list[int], need: int) -> list[tuple[int, int]]:
    """Fewest children covering `need` blocks: largest first, the last one best-fit; (child position, blocks).

    Children are sorted once, largest first (fewest leftover pods, then position, on ties); while no
    remaining child can take everything left, the next largest is taken whole."""
    by_size = sorted(range(len(caps)), key=lambda j: (-caps[j], leftovers[j], j))
    chosen: list[tuple[int, int]] = []
    remaining, taken = need, 0
    while remaining > 0:
        if taken < len(by_size) and caps[by_size[taken]] >= remaining:
            fitting = []
            for j in by_size[taken:]:
                if caps[j] < remaining:
                    break
                fitting.append(j)
            best = min(fitting, key=lambda j: (caps[j], leftovers[j], j))
            chosen.append((best, remaining))
            return chosen
        if taken == len(by_size) or caps[by_size[taken]] <= 0:
            raise ValueError("domain cannot hold the requested pods")
        largest = by_size[taken]
        chosen.append((largest, caps[largest]))
        taken += 1
        remaining -= caps[largest]
    return chosen


def _even(caps: list[int], positions: list[int], need: int) -> list[tuple[int, int]]:
    """Water-fill `need` blocks over `positions` as evenly as their caps allow."""
    share = {j: 0 for j in positions}
    remaining = need
    while remaining > 0:
        open_ = [j for j in positions if share[j] < caps[j]]
        if not open_:
            raise ValueError("domain cannot hold the requested pods")
        for j in sorted(open_, key=lambda j: (share[j], -caps[j], j)):
            if remaining == 0:
                break
            share[j] += 1
            remaining -= 1
    return [(j, n) for j, n in share.items() if n > 0]


def choose_children(caps: list[int], leftovers: list[int], need: int, strategy: str) -> list[tuple[int, int]]:
    """(child position, blocks) covering `need` blocks under one split strategy."""
    packed = _pack(caps, leftovers, need)
    if strategy == PACK or len(packed) == 1:
        return packed
    if strategy == BALANCE:
        widest = sorted(range(len(caps)), key=lambda j: (-caps[j], leftovers[j], j))[: len(packed)]
        return _even(caps, widest, need)
    return _even(caps, [j for j in range(len(caps)) if caps[j] > 0], need)


def _block_caps(view: SlotView, kids: list[int], pods: int, blocks: list[int]) -> tuple[int, list[int]]:
    """Largest block (and per-child block capacity) covering `pods`: first with every inner block aligned too,
    then with only this block aligned, then unaligned."""
    usable = [b for b in sorted(blocks, reverse=True) if b <= pods and pods % b == 0]
    kinds = (lambda b: view.nested_caps(tuple(x for x in blocks if x <= b and b % x == 0)),
             view.aligned_caps, lambda b: view.domain_slots // b)
    positions = np.array(kids, dtype=np.int64)
    for caps_of in kinds:
        for block in usable:
            caps = caps_of(block)[positions].tolist()
            if sum(caps) >= pods // block:
                return block, caps
    return 1, view.domain_slots[positions].tolist()


def fill_domain(view: SlotView, domain: int, pods: int, blocks: list[int], strategy: str = PACK) -> list[int]:
    """Node index for each of `pods` consecutive sequence positions inside `domain`, aligned to blocks (memoised per view)."""
    memo = view.__dict__.setdefault("_fills", {})
    key = (domain, pods, tuple(blocks), strategy)
    if key not in memo:
        memo[key] = _fill_domain(view, domain, pods, blocks, strategy)
    return memo[key]


def _fill_domain(view: SlotView, domain: int, pods: int, blocks: list[int], strategy: str) -> list[int]:
    tree = view.tree
    if domain in tree.host_node:
        return [tree.host_node[domain]] * pods
    slots = view.slot_list
    kids = [c for c in tree.kids(domain) if slots[c] > 0]
    block, caps = _block_caps(view, kids, pods, blocks)
    inner_block = min((b for b in blocks if 1 < b <= pods and pods % b == 0), default=1)
    kid_slots = [slots[c] for c in kids]
    if block == 1 and inner_block > 1 and strategy != SPREAD and max(kid_slots, default=0) >= inner_block:
        pieces = split_blocks(kid_slots, pods, inner_block)
        if pieces is not None:
            return _fill_pieces(view, kids, pieces, blocks)
    leftovers = [slot - cap * block for slot, cap in zip(kid_slots, caps)]
    chosen = choose_children(caps, leftovers, pods // block, strategy)
    inner = strategy if len(chosen) == 1 or strategy == SPREAD else PACK
    nodes: list[int] = []
    hosts = tree.host_node
    for position, count in chosen:
        kid = kids[position]
        if kid in hosts:  # what fill_domain answers for a host, without the memo round trip
            nodes.extend([hosts[kid]] * (count * block))
        else:
            nodes.extend(fill_domain(view, kid, count * block, blocks, inner))
    return nodes


def split_blocks(slots: list[int], pods: int, block: int) -> list[list[tuple[int, int]]] | None:
    """Per block of `block` pods, its (child position, pods) pieces: as many whole blocks as children can hold
    (fewest children), then each remaining block over the fewest children, evenly (least shared uplink per child)."""
    slots = list(slots)
    need = pods // block
    caps = [s // block for s in slots]
    whole = min(sum(caps), need)
    pieces: list[list[tuple[int, int]]] = []
    if whole:
        for position, count in _pack(caps, [s % block for s in slots], whole):
            pieces.extend([[(position, block)]] * count)
            slots[position] -= count * block
    for _ in range(need - whole):
        chosen, total = [], 0
        for j in sorted(range(len(slots)), key=lambda j: (-slots[j], j)):
            if total >= block or slots[j] <= 0:
                break
            chosen.append(j)
            total += slots[j]
        if total < block:
            return None
        share = _even(slots, chosen, block)
        pieces.append(share)
        for j, count in share:
            slots[j] -= count
    return pieces


def _fill_pieces(view: SlotView, kids: list[int], pieces: list[list[tuple[int, int]]], blocks: list[int]) -> list[int]:
    """Nodes for split blocks: each child is filled once with all its pods, then handed out piece by piece."""
    per_child: dict[int, int] = {}
    for block_pieces in pieces:
        for position, count in block_pieces:
            per_child[position] = per_child.get(position, 0) + count
    handed = {position: iter(fill_domain(view, kids[position], count, blocks, PACK))
              for position, count in per_child.items()}
    return [next(handed[position]) for block_pieces in pieces for position, count in block_pieces for _ in range(count)]


def candidate_domains(view: SlotView, pods: int, min_level: int, per_level: int = 3) -> list[int]:
    """Domains that can hold `pods`, deepest level first: per level the best fits and the roomiest.

    Per level: the `per_level - 1` domains with the fewest slots that still fit (ties: lower id first)
    and the roomiest (ties: highest id), found by partial selection rather than a full sort."""
    tree = view.tree
    found: list[int] = []
    for level in range(tree.levels - 1, min_level - 1, -1):
        if level == ROOT:
            if view.total >= pods:
                found.append(ROOT)
            continue
        at_level = tree.level_domains[level]
        ids = at_level[view.domain_slots[at_level] >= pods]
        if ids.size == 0:
            continue
        key = view.domain_slots[ids] * (tree.size[1] + 1) + ids  # (slots, id) as one sortable integer
        fewest = max(per_level - 1, 0)
        if ids.size > fewest + 1 and fewest > 0:
            smallest = np.argpartition(key, fewest - 1)[:fewest]
            smallest = smallest[np.argsort(key[smallest])]
        else:
            smallest = np.argsort(key)[:fewest]
        picks = [int(d) for d in ids[smallest]] + [int(ids[int(np.argmax(key))])]
        found.extend(dict.fromkeys(picks))
    return found
