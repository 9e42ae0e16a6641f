"""Building blocks of the `meshfit` policy: the pod-level axis grid, candidate pod sequences, an alignment-aware
hierarchical fill of one domain, and candidate domains (free pod slots per domain: `meshfit_view`).

The idea: the ranks of a gang form a grid of axes (rank order, innermost first); pods hold
contiguous rank blocks, so above the pod the grid is a smaller grid of "pod-level" axes.  Any
nesting order of those pod-level axes gives a pod *sequence* whose contiguous runs are whole
groups of the inner axes.  Filling a domain's children with runs that are multiples of the
largest possible group block keeps those groups inside one child, so the heaviest axes stay on
the fastest tier.  Which nesting order and which domain win is decided by the cost model.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np

from plugins.policies.meshfit_view import ROOT, SlotView, slot_view
from scheduler.placement.jobs import Gang, parse_rank_order

__all__ = ["BALANCE", "PACK", "ROOT", "SPREAD", "SlotView", "candidate_domains", "choose_children", "fill_domain",
           "pod_axis_grid", "pod_sequence", "slot_view", "split_blocks", "virtual_orders"]

MAX_VIRTUAL_ORDERS = 6
"""At most this many pod-level axis nestings are priced per rank order."""


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
    if caps and min(caps) == max(caps) > 0 and min(leftovers) == max(leftovers):
        return _pack_uniform(caps[0], len(caps), need)
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


def _pack_uniform(cap: int, children: int, need: int) -> list[tuple[int, int]]:
    """`_pack` when every child has the same capacity and leftover: children in order, the last one partly."""
    whole, rest = divmod(need, cap)
    if whole + (rest > 0) > children:
        raise ValueError("domain cannot hold the requested pods")
    if rest == 0:  # the last child needed is best-fit among equals: the first of them, taking a full cap
        return [(j, cap) for j in range(whole)]
    return [(j, cap) for j in range(whole)] + [(whole, rest)]


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


def _usable_blocks(blocks: tuple[int, ...], pods: int) -> tuple[list[tuple[int, tuple[int, ...]]], int]:
    """(block, the blocks nested inside it) for every block dividing `pods`, largest first, and the smallest such
    block above one pod (1 if none): cached per (blocks, pods)."""
    key = (blocks, pods)
    found = _USABLE.get(key)
    if found is None:
        usable = [(b, tuple(x for x in blocks if x <= b and b % x == 0))
                  for b in sorted(blocks, reverse=True) if b <= pods and pods % b == 0]
        found = _USABLE[key] = (usable, min((b for b in blocks if 1 < b <= pods and pods % b == 0), default=1))
    return found


_USABLE: dict[tuple[tuple[int, ...], int], tuple[list[tuple[int, tuple[int, ...]]], int]] = {}


def _block_caps(view: SlotView, domain: int, kids: list[int], kid_slots: list[int], pods: int,
                blocks: tuple[int, ...]) -> tuple[int, list[int]]:
    """Largest block (and per-child block capacity) covering `pods`: first with every inner block aligned too,
    then with only this block aligned, then unaligned.

    A domain's nested capacity bounds the sum of its children's, and children below the deepest level that
    holds a block have none, so most blocks that cannot cover `pods` are rejected without reading the children;
    blocks of one pod need nothing but the children's slots."""
    kid_level = view.tree.level_of(domain) + 1
    usable = _usable_blocks(blocks, pods)[0]
    for block, nested in usable:
        if nested == (1,) and sum(kid_slots) >= pods:
            return 1, kid_slots  # one-pod blocks: the caps are the slots, and the children hold the domain's pods
        need = pods // block
        if sum(slot // block for slot in kid_slots) < need:
            continue  # no child holds more aligned blocks than its slots hold blocks
        if len(nested) == 2 and nested[0] == 1:  # the nested caps are the aligned caps of the free slots
            top = view.block_level(block)
            if kid_level > top:
                continue
            if kid_level == top:  # each child's own slots // block, whose sum was checked above
                return block, [slot // block for slot in kid_slots]
        caps_array, deepest = view.nested_entry(nested)
        if kid_level > deepest or (domain != ROOT and caps_array[domain] < need):
            continue
        caps = caps_array[kids].tolist()
        if sum(caps) >= need:
            return block, caps
    for caps_of in (view.aligned_caps, lambda b: view.domain_slots // b):
        for block, _ in usable:
            caps = caps_of(block)[kids].tolist()
            if sum(caps) >= pods // block:
                return block, caps
    return 1, list(kid_slots)


def fill_domain(view: SlotView, domain: int, pods: int, blocks: tuple[int, ...] | list[int],
                strategy: str = PACK) -> list[int]:
    """Node index for each of `pods` consecutive sequence positions inside `domain`, aligned to blocks.

    Memoised per view (read-only results).  A domain whose children are hosts with one free slot each is filled
    the same way for any blocks and strategy: every block larger than one pod fits in no host, every host has the
    same capacity and leftover, so each strategy takes the first `pods` of those hosts in child order, one pod
    each (a slice of the view's `one_slot_nodes`)."""
    one_slot = view.one_slot_nodes(domain)
    if one_slot is not None:
        if len(one_slot) < pods:
            raise ValueError("domain cannot hold the requested pods")
        return one_slot[:pods]
    blocks = tuple(blocks)
    key = (domain, pods, blocks, strategy)
    memo = view.fills
    found = memo.get(key)
    if found is None:
        found = memo[key] = _fill_domain(view, domain, pods, blocks, strategy)
    return found


def _fill_domain(view: SlotView, domain: int, pods: int, blocks: tuple[int, ...], strategy: str) -> list[int]:
    hosts = view.tree.host_node
    if domain in hosts:
        return [hosts[domain]] * pods
    kids, kid_slots = view.holding_kids(domain)
    block, caps = _block_caps(view, domain, kids, kid_slots, pods, blocks)
    inner_block = _usable_blocks(blocks, pods)[1]
    if block == 1 and inner_block > 1 and strategy != SPREAD and max(kid_slots, default=0) >= inner_block:
        pieces = split_blocks(kid_slots, pods, inner_block)
        if pieces is not None:
            return _fill_pieces(view, kids, pieces, blocks)
    leftovers = [slot - cap * block for slot, cap in zip(kid_slots, caps)]
    chosen = choose_children(caps, leftovers, pods // block, strategy)
    inner = strategy if len(chosen) == 1 or strategy == SPREAD else PACK
    nodes: list[int] = []
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
    filled = {position: fill_domain(view, kids[position], count, blocks, PACK) for position, count in per_child.items()}
    handed = dict.fromkeys(per_child, 0)
    nodes: list[int] = []
    for block_pieces in pieces:
        for position, count in block_pieces:
            start = handed[position]
            nodes.extend(filled[position][start:start + count])
            handed[position] = start + count
    return nodes


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
        if level == tree.levels - 1 and view.kept is not None and view.kept.max_slots < pods:
            continue  # no node holds that many pods
        fewest = max(per_level - 1, 0)
        if len(tree.level_domain_lists[level]) <= SMALL_LEVEL:
            found.extend(_picks_of_small_level(view, tree.level_domain_lists[level], pods, fewest))
            continue
        at_level = tree.level_domains[level]
        ids = at_level[view.domain_slots[at_level] >= pods]
        if ids.size == 0:
            continue
        key = view.domain_slots[ids] * (tree.size[1] + 1) + ids  # (slots, id) as one sortable integer
        if ids.size > fewest + 1 and fewest > 0:
            smallest = np.argpartition(key, fewest - 1)[:fewest]
            smallest = smallest[np.argsort(key[smallest])]
        else:
            smallest = np.argsort(key)[:fewest]
        picks = [int(d) for d in ids[smallest]] + [int(ids[int(np.argmax(key))])]
        found.extend(dict.fromkeys(picks))
    return found


SMALL_LEVEL = 128
"""Levels of at most this many domains are searched for candidates in Python lists rather than numpy arrays."""


def _picks_of_small_level(view: SlotView, at_level: list[int], pods: int, fewest: int) -> list[int]:
    """`candidate_domains`' picks at one level of few domains: the `fewest` fitting domains with the fewest slots
    (ties: lower id first), then the roomiest (ties: highest id), each once."""
    slots = view.slot_list
    ids = [domain for domain in at_level if slots[domain] >= pods]
    if not ids:
        return []
    smallest = sorted(ids, key=lambda domain: (slots[domain], domain))[:fewest] if fewest > 0 else []
    return list(dict.fromkeys(smallest + [max(ids, key=lambda domain: (slots[domain], domain))]))
