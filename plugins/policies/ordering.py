"""Static per-topology arrays the baseline policies sort and break ties with (cached on the topology).

Kueue, Volcano and first-fit order domains and nodes by name; comparing names is slow in Python
loops, so each domain gets its rank among all distinct domain names (equal names share a rank, so
ordering by rank is exactly ordering by name) and nodes get their by-name order once.
"""

from __future__ import annotations

import numpy as np

from topology.model import ClusterTopology

NO_FIT = np.iinfo(np.int64).max
"""Sort key of a candidate that does not fit (larger than any real key)."""


class TopologyOrder:
    """Name ranks, per-level domain ids, children, parents, sizes and the by-name node order of one topology."""

    def __init__(self, topo: ClusterTopology) -> None:
        names = [d.name for d in topo.domains]
        rank_of = {name: rank for rank, name in enumerate(sorted(set(names)))}
        self.domain_rank = np.array([rank_of[name] for name in names], dtype=np.int64)
        self.rank_span = len(rank_of) + 1
        """Larger than every rank: `value * rank_span + rank` orders by value, then by name."""
        levels = np.array([d.level for d in topo.domains], dtype=np.int64)
        self.at_level = [np.flatnonzero(levels == level) for level in range(len(topo.levels))]
        self.children = [np.array(d.children, dtype=np.int64) for d in topo.domains]
        self.parent = np.array([-1 if d.parent is None else d.parent for d in topo.domains], dtype=np.int64)
        """Parent domain id of every domain (-1 at the top level)."""
        self.first_node = np.array([d.nodes[0] if d.nodes else -1 for d in topo.domains], dtype=np.int64)
        self.domain_gpus = np.array([d.gpus_total for d in topo.domains], dtype=np.int64)
        paths = np.array([n.path for n in topo.nodes], dtype=np.int64).reshape(len(topo.nodes), len(topo.levels))
        self.path_rank = self.domain_rank[paths] if len(topo.nodes) else paths
        """Per node, the name rank of its domain at every level (outermost first)."""
        self.nodes_by_name = np.array(sorted(range(len(topo.nodes)), key=lambda i: topo.nodes[i].name),
                                      dtype=np.int64)
        self.size = (len(topo.nodes), len(topo.domains))


def topology_order(topo: ClusterTopology) -> TopologyOrder:
    """The cached `TopologyOrder` of `topo` (rebuilt if nodes or domains changed)."""
    cached = getattr(topo, "_policy_order", None)
    if cached is None or cached.size != (len(topo.nodes), len(topo.domains)):
        cached = TopologyOrder(topo)
        topo._policy_order = cached  # type: ignore[attr-defined]
    return cached


def best_fit(order: TopologyOrder, slots: np.ndarray, candidates: np.ndarray, need: int) -> int | None:
    """Among `candidates` holding at least `need` slots, the one with the fewest slots, then by name
    (the first in `candidates` order on a full tie); None if none fits."""
    if not candidates.size:
        return None
    held = slots[candidates]
    key = np.where(held >= need, held * order.rank_span + order.domain_rank[candidates], NO_FIT)
    best = int(key.argmin())
    return int(candidates[best]) if held[best] >= need else None
