"""Cluster model: node labels -> levels and domains -> coordinate paths and a networkx graph.

The model classes import eagerly; loaders, generator and report functions are imported on first use
so `import topology` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from topology.model import CLUSTER_TIER, ClusterTopology, Domain, Level, LinkTier, Node, TopologyError

_LAZY = {
    "load_cluster": "topology.loaders",
    "topology_from_objects": "topology.loaders",
    "node_record_from_k8s": "topology.k8s",
    "generate_cluster": "topology.generator",
    "generate_nodelist": "topology.generator",
    "PRESETS": "topology.presets",
    "TopologyConfig": "topology.config",
    "topology_json": "topology.report",
    "to_graph": "topology.graph",
}

__all__ = ["CLUSTER_TIER", "ClusterTopology", "Domain", "Level", "LinkTier", "Node", "TopologyError", *_LAZY]


def __getattr__(name: str) -> Any:
    """Import the loader / generator / report helpers on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topology' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
