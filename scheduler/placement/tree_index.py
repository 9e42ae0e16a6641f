"""A topology's static tree as plain lists and numpy arrays (`TreeIndex`), cached per topology.

Generic over policies: the `meshfit` search and the baselines read it, and `scheduler.placement.result.engine.warm_caches`
builds it after every topology rebuild.
"""

from __future__ import annotations

import numpy as np

from topology.model import ClusterTopology

ROOT = -1
"""Pseudo-domain id of the whole cluster (its children are the top-level domains)."""


class TreeIndex:
    """Static tree structure of a topology as plain lists and numpy arrays (cached per topology)."""

    def __init__(self, topo: ClusterTopology) -> None:
        self.levels = len(topo.levels)
        self.paths = np.array([n.path for n in topo.nodes], dtype=np.int64).reshape(len(topo.nodes), self.levels)
        self.domain_level = np.array([d.level for d in topo.domains], dtype=np.int64)
        self.level_list: list[int] = [d.level for d in topo.domains] + [ROOT]
        """Level per domain id as a list, with ROOT (-1) at index -1: `level_list[ROOT]` is ROOT."""
        self.children: list[list[int]] = [list(d.children) for d in topo.domains]
        self.root_children = [d.id for d in topo.domains if d.parent is None]
        self.host_node = {d.id: d.nodes[0] for d in topo.domains if d.level == self.levels - 1}
        self.host_node_array = np.full(len(topo.domains), -1, dtype=np.int64)
        """`host_node` as an array indexed by domain id (-1 off the host level)."""
        for domain, node in self.host_node.items():
            self.host_node_array[domain] = node
        self.ancestors = np.full((len(topo.domains), self.levels), -1, dtype=np.int64)
        for d in topo.domains:
            self.ancestors[d.id, : d.level + 1] = topo.nodes[d.nodes[0]].path[: d.level + 1]
        self.oversubscribed = any(level.link.oversubscription > 1.0 for level in topo.levels)
        self.path_lists: list[list[int]] = self.paths.tolist()
        """`paths` as Python lists (cheaper than numpy for a handful of nodes)."""
        self.level_domains = [np.flatnonzero(self.domain_level == level) for level in range(self.levels)]
        """Domain ids of each level, ascending."""
        self.level_domain_lists: list[list[int]] = [ids.tolist() for ids in self.level_domains]
        """`level_domains` as Python lists (cheaper than numpy for a level of a few dozen domains)."""
        position = np.zeros(len(topo.domains), dtype=np.int64)
        for ids in self.level_domains:
            position[ids] = np.arange(ids.size)
        parent = np.array([-1 if d.parent is None else d.parent for d in topo.domains], dtype=np.int64)
        self.parent_position = [position[parent[ids]] for ids in self.level_domains[1:]]
        """`parent_position[l][i]`: position in `level_domains[l]` of the parent of `level_domains[l + 1][i]`."""
        self.children_arrays = [np.array(d.children, dtype=np.int64) for d in topo.domains]
        self.root_children_array = np.array(self.root_children, dtype=np.int64)
        self.size = (len(topo.nodes), len(topo.domains))

    def kids(self, domain: int) -> list[int]:
        """Children of a domain, or the top-level domains for ROOT."""
        return self.root_children if domain == ROOT else self.children[domain]

    def kid_array(self, domain: int) -> np.ndarray:
        """Children of a domain as an array, or the top-level domains for ROOT."""
        return self.root_children_array if domain == ROOT else self.children_arrays[domain]

    def level_of(self, domain: int) -> int:
        """Level of a domain (-1 for ROOT)."""
        return self.level_list[domain]


def tree_index(topo: ClusterTopology) -> TreeIndex:
    """The cached `TreeIndex` of `topo` (rebuilt if nodes or domains changed)."""
    cached = getattr(topo, "_meshfit_tree", None)
    if cached is None or cached.size != (len(topo.nodes), len(topo.domains)):
        cached = TreeIndex(topo)
        topo._meshfit_tree = cached  # type: ignore[attr-defined]
    return cached
