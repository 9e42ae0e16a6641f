"""`NodeTopology`: the nodes `ClusterState` holds, each judged (GPUs, labels, schedulable), and how its
`ClusterTopology` is built from them and the Kueue Topology / Volcano HyperNode objects.

Holdings in the topology: a bound, unfinished GPU pod holds `pod:<ns>/<name>`, projected from the room ledger's claims
(`scheduler.cache.gpu_projection`); a reserved gang slot holds `resv:<ns>/<gang>/<index>` (see
`scheduler.gangs.ledger`).
"""

from __future__ import annotations

from typing import Any, Iterable

from scheduler.gangs.health import NodeFailures, mark_failed_unschedulable
from topology.builder import HOST_LABEL, HOST_LEVEL
from topology.config import TopologyConfig
from topology.k8s import node_record_from_k8s
from topology.model import ClusterTopology, Level, LinkTier, TopologyError


def empty_topology() -> ClusterTopology:
    """A topology with no nodes (before the first list, or when no node has GPUs)."""
    link = LinkTier(1.0, 1.0)
    return ClusterTopology([Level(HOST_LEVEL, HOST_LABEL, link, HOST_LEVEL, (HOST_LABEL,))], [], [], link)


def topology_from_objects(objects: list[dict], config: Any, tolerations: Iterable[Any]) -> ClusterTopology:
    """Indirection to `topology.loaders.topology_from_objects` (imported on first use)."""
    from topology.loaders import topology_from_objects as build

    return build(objects, config, tolerations)


class NodeTopology:
    """Nodes by name with their judgements (`signature`), and the topology all of them make (`build`)."""

    def __init__(self, config: TopologyConfig, tolerations: tuple[Any, ...], health: NodeFailures) -> None:
        self.config = config
        """Levels, links and which resources count as GPUs."""
        self.tolerations = tolerations
        """Taints tolerated when judging whether a node is schedulable."""
        self.health = health
        """Failed nodes: each judgement notes the node's current state there; failed ones are unschedulable."""
        self.nodes: dict[str, dict] = {}
        """Name -> node object."""
        self.signatures: dict[str, tuple] = {}
        """Name -> the node's `signature` when last judged."""

    def replace(self, nodes: Iterable[dict]) -> None:
        """Hold exactly `nodes` (a relist), each judged afresh."""
        self.nodes = {_node_name(n): n for n in nodes}
        self.health.reset(self.nodes)
        self.judge_all()

    def judge_all(self) -> None:
        """Judge every node again (the health sources changed)."""
        self.signatures = {name: self.signature(n) for name, n in self.nodes.items()}

    def upsert(self, node: dict, topology: ClusterTopology) -> bool:
        """Add or update a node; True when the topology must be rebuilt (labels or GPUs changed), while a mere
        readiness change is flipped in `topology` in place."""
        name = _node_name(node)
        old = self.signatures.get(name)
        new = self.signature(node)
        self.nodes[name] = node
        self.signatures[name] = new
        if old == new:
            return False
        topo_node = topology.node_by_name.get(name)
        if old is not None and topo_node is not None and old[:2] == new[:2] and new[0] != "invalid":
            topology.set_schedulable(name, new[2], new[3])
            return False
        return True

    def delete(self, name: str) -> bool:
        """Forget a node; True when it was held (the topology must be rebuilt)."""
        if self.nodes.pop(name, None) is None:
            return False
        self.health.observe(name, None)
        self.signatures.pop(name, None)
        return True

    def signature(self, node: dict) -> tuple:
        """What of `node` the topology depends on: (GPUs, labels, schedulable, reason), or ("invalid", error)."""
        try:
            record = node_record_from_k8s(node, self.tolerations, self.config.gpu_resources)
        except TopologyError as exc:
            return ("invalid", str(exc))
        failure = self.health.observe(_node_name(node), node)
        return (record.gpus_total, tuple(sorted(record.labels.items())), record.schedulable and failure is None,
                record.unschedulable_reason or (failure and f"failed: {failure.reason}"))

    def build(self, topology_objects: list[dict]) -> ClusterTopology:
        """The topology of the nodes (and the Kueue Topology / HyperNode objects), holding nothing yet; an invalid
        description gives an empty topology carrying the error as a warning."""
        objects: list[dict] = [{**n, "kind": "Node", "apiVersion": "v1"} for n in self.nodes.values()]
        objects += topology_objects
        try:
            topo = topology_from_objects(objects, self.config, self.tolerations) if self.nodes else empty_topology()
        except TopologyError as exc:
            topo = empty_topology()
            topo.warnings.append(str(exc))
        mark_failed_unschedulable(topo, self.health)
        return topo


def _node_name(node: dict) -> str:
    return str((node.get("metadata") or {}).get("name") or "")
