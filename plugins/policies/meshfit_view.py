"""The slot view of the `meshfit` search: free pod slots of one gang per node and per domain, and the per-view
caches the search reads (aligned and nested block capacities, children holding slots, fully used fills).

Without pre-assigned domains a view reads the topology's incrementally kept slot arrays (`slots_for_pods`), so
building one costs no pass over the nodes; everything a search derives from them is cached on the view, which is
valid until the topology next changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler.placement.capacity import allowed_nodes
from scheduler.placement.jobs import Gang
from scheduler.placement.tree_index import ROOT, TreeIndex, tree_index
from topology.model import ClusterTopology
from topology.slots import PodSlots

__all__ = ["ROOT", "SlotView", "slot_view"]

WALK_BUDGET = 256
"""Children `SlotView.holds_blocks` reads one by one before it counts with whole-tree arrays instead."""


@dataclass
class SlotView:
    """How many pods of this gang fit on every node and in every domain right now."""

    tree: TreeIndex
    node_slots: np.ndarray
    node_free: np.ndarray
    domain_slots: np.ndarray
    total: int
    kept: PodSlots | None = None
    """The topology's incrementally kept slots behind these arrays (None when restricted to assigned domains)."""
    fills: dict[tuple, list[int]] = field(default_factory=dict, repr=False)
    """`fill_domain` results of this view."""

    @property
    def slot_list(self) -> list[int]:
        """`domain_slots` as a Python list (cheap per-domain lookups while filling): the topology's incrementally kept
        list behind the view's arrays, or built once per view when restricted to assigned domains."""
        cached = self.__dict__.get("_slot_list")
        if cached is None:
            kept = self.kept
            cached = self.__dict__["_slot_list"] = self.domain_slots.tolist() if kept is None else kept.domain_list
        return cached

    def holding_kids(self, domain: int) -> tuple[list[int], list[int]]:
        """(children with free slots in child order, their slots), cached per view (read-only)."""
        cache = self.__dict__.setdefault("_holding_kids", {})
        found = cache.get(domain)
        if found is None:
            slots = self.slot_list
            kids = [kid for kid in self.tree.kids(domain) if slots[kid] > 0]
            found = cache[domain] = (kids, [slots[kid] for kid in kids])
        return found

    def one_slot_nodes(self, domain: int) -> list[int] | None:
        """The nodes of the children of `domain` holding a slot, in child order, when those children are hosts with
        one free slot each, else None (cached per view; read-only)."""
        cache = self.__dict__.setdefault("_one_slot_nodes", {})
        if domain not in cache:
            nodes = None
            if self.tree.level_list[domain] == self.tree.levels - 2:  # only domains whose children are hosts
                kids, kid_slots = self.holding_kids(domain)
                if max(kid_slots, default=0) == 1:
                    nodes = list(map(self.tree.host_node.__getitem__, kids))
            cache[domain] = nodes
        return cache[domain]

    def slots(self, domain: int) -> int:
        """Pods that fit in `domain` (ROOT = the cluster)."""
        return self.total if domain == ROOT else int(self.domain_slots[domain])

    def most_slots_at(self, level: int) -> int:
        """The most slots any one domain of `level` has (cached per view)."""
        cache = self.__dict__.setdefault("_level_max", {})
        found = cache.get(level)
        if found is None:
            ids = self.tree.level_domain_lists[level]
            if len(ids) <= 128:  # a few dozen domains: cheaper from the list than through numpy
                slots = self.slot_list
                found = cache[level] = max((slots[domain] for domain in ids), default=0)
            else:
                found = cache[level] = int(self.domain_slots[self.tree.level_domains[level]].max()) if ids else 0
        return found

    def may_hold_at(self, level: int, pods: int) -> bool:
        """False only when no domain of `level` has `pods` slots (a cheap bound first, the exact maximum if needed)."""
        if level == self.tree.levels - 1 and self.kept is not None and self.kept.max_slots < pods:
            return False
        return self.most_slots_at(level) >= pods

    def holds_blocks(self, domain: int, block: int, level: int, blocks: int) -> bool:
        """Whether the domains of `level` inside `domain` (ROOT = the cluster; `level` deeper than the domain's) hold
        `blocks` whole blocks of `block` pods, each block inside one of them.

        Walks the domains below `domain` that have room for a block, stopping once enough are counted; a long walk
        gives way to per-(block, level) counts computed for the whole tree at once and cached for the view."""
        if not self.may_hold_at(level, block):
            return False
        slots, tree = self.slot_list, self.tree
        level_list, count, budget = tree.level_list, 0, WALK_BUDGET
        stack = [iter(tree.kids(domain))]  # depth first, into a child as soon as it is met
        while stack and budget > 0:
            for kid in stack[-1]:
                budget -= 1
                room = slots[kid]
                if room < block:
                    continue
                if level_list[kid] < level:
                    stack.append(iter(tree.kids(kid)))
                    break
                count += room // block
                if count >= blocks:
                    return True
            else:
                stack.pop()
        if not stack:
            return False
        cache = self.__dict__.setdefault("_blocks_inside", {})
        found = cache.get((block, level))
        if found is None:
            found = cache[(block, level)] = _blocks_at(tree, self.domain_slots, block, level)
        caps, total = found
        return (total if domain == ROOT else int(caps[domain])) >= blocks

    def block_level(self, block: int) -> int:
        """The deepest level with a domain that has room for `block` pods (0 when none has): below it the
        `aligned_caps` of `block` are zero, at it they are each domain's own slots // block."""
        cache = self.__dict__.setdefault("_block_level", {})
        found = cache.get(block)
        if found is None:
            found = self.tree.levels - 1
            while found > 0 and not self.may_hold_at(found, block):
                found -= 1
            cache[block] = found
        return found

    def aligned_caps(self, block: int, base: np.ndarray | None = None, key: object = None) -> np.ndarray:
        """Per domain, how many whole blocks of `block` pods fit inside domains of the deepest level able to hold one.

        `base` (pods usable per domain, default the free slots) lets callers count only slots that keep
        smaller inner blocks aligned too; `key` names that base for the cache (None and () both mean the free
        slots).  Read-only: the result may be shared."""
        return self._aligned_entry(block, base, key)[0]

    def _aligned_entry(self, block: int, base: np.ndarray | None, key: object,
                       top: int | None = None) -> tuple[np.ndarray, int]:
        """(aligned caps, deepest level where they may be nonzero); `top`: deepest level where `base` may be nonzero."""
        if base is None:
            key = ()
        cache = self.__dict__.setdefault("_aligned", {})
        found = cache.get((block, key))
        if found is None:
            tree = self.tree
            if key == ():
                if block == 1:
                    found = (self.domain_slots, tree.levels - 1)  # every host holds its own slots: sums are the slots
                else:
                    found = _aligned(tree, self.domain_slots, block, self.block_level(block))
            else:
                found = _aligned(tree, base, block, tree.levels - 1 if top is None else top)
            cache[(block, key)] = found
        return found

    def nested_caps(self, blocks: tuple[int, ...]) -> np.ndarray:
        """Per domain, whole blocks of `blocks[-1]` pods that fit with every smaller block of `blocks` aligned too."""
        return self.nested_entry(blocks)[0]

    def nested_entry(self, blocks: tuple[int, ...]) -> tuple[np.ndarray, int]:
        """(`nested_caps(blocks)`, deepest level where they may be nonzero), cached per view."""
        cache = self.__dict__.setdefault("_nested", {})
        found = cache.get(blocks)
        if found is None:
            caps, deepest = self.domain_slots, self.tree.levels - 1
            for position, block in enumerate(blocks):
                if position and blocks[position - 1] == 1 and all(b == 1 for b in blocks[:position]):
                    key: tuple[int, ...] = ()  # blocks of one pod align trivially: the base is still the free slots
                    base = self.domain_slots
                else:
                    key = blocks[:position]
                    base = caps if position == 0 else caps * blocks[position - 1]
                caps, deepest = self._aligned_entry(block, base, key, deepest)
            found = cache[blocks] = (caps, deepest)
        return found


def _aligned(tree: TreeIndex, base: np.ndarray, block: int, top: int) -> tuple[np.ndarray, int]:
    """(caps, deepest): `base // block` per domain, with every level above the deepest level holding a block replaced
    by the sum over its domains at that level (summed level by level up the tree).  `base` is zero below `top`."""
    level_ids = tree.level_domains
    caps = np.zeros(tree.size[1], dtype=np.int64)
    for deepest in range(top, -1, -1):
        values = base[level_ids[deepest]] // block
        if deepest == 0 or values.any():
            break
    caps[level_ids[deepest]] = values
    for level in range(deepest - 1, -1, -1):
        values = np.bincount(tree.parent_position[level], weights=values, minlength=level_ids[level].size)
        caps[level_ids[level]] = values
    return caps, deepest


def _blocks_at(tree: TreeIndex, base: np.ndarray, block: int, level: int) -> tuple[np.ndarray, int]:
    """(per domain id, whole blocks of `block` pods its descendants at `level` hold (`base // block` summed over
    them; 0 deeper than `level`), and the cluster's total)."""
    level_ids = tree.level_domains
    caps = np.zeros(tree.size[1], dtype=np.int64)
    values = base[level_ids[level]] // block
    caps[level_ids[level]] = values
    for upper in range(level - 1, -1, -1):
        values = np.bincount(tree.parent_position[upper], weights=values, minlength=level_ids[upper].size)
        caps[level_ids[upper]] = values
    return caps, int(values.sum())


def slot_view(gang: Gang, topo: ClusterTopology) -> SlotView:
    """Free pod slots per node and per domain for `gang`, honouring its pre-assigned domains.

    Without pre-assigned domains the arrays are the topology's incrementally kept ones (`slots_for_pods`):
    live, read-only, valid until the topology next changes."""
    tree = tree_index(topo)
    allowed = allowed_nodes(gang, topo)
    if allowed is None:
        slots = topo.slots_for_pods(max(gang.gpus_per_pod, 1))
        return SlotView(tree, slots.node, topo.free_arrays()[0], slots.domain, slots.total, slots)
    free = topo.free_arrays()[0]
    mask = np.zeros(len(topo.nodes), dtype=bool)
    mask[list(allowed)] = True
    slots = np.where(mask, free // max(gang.gpus_per_pod, 1), 0)
    weights = np.repeat(slots, tree.levels).astype(np.float64)
    domain_slots = np.bincount(tree.paths.ravel(), weights=weights, minlength=len(topo.domains)).astype(np.int64)
    return SlotView(tree, slots, free, domain_slots, int(slots.sum()))
