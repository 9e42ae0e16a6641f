"""Cluster model: node labels -> levels and domains -> coordinate paths and a networkx graph."""

from topology.model import CLUSTER_TIER, ClusterTopology, Domain, Level, LinkTier, Node, TopologyError

__all__ = ["CLUSTER_TIER", "ClusterTopology", "Domain", "Level", "LinkTier", "Node", "TopologyError"]
