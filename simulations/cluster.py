"""Clusters to simulate on: a picklable spec (preset + nodes + link overrides, or a file) and its topology.

The topology handed to the engine is the ordinary `ClusterTopology`, with one bookkeeping-only
speed-up for long simulations (`make_fast`): each node's `gpus_free` becomes a plain attribute kept
in sync whenever `gpus_used` or `schedulable` is assigned, the cluster's free total is summed over
the top-level domains instead of every node, and a histogram of nodes by free GPUs is kept so the
simulator can count free pod slots (`free_pod_slots`) without walking every node.  Every policy reads
the same values it would read from the base classes (tests check this); only the cost of reading
them changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topology.model import ClusterTopology, Node, TopologyError


class FastNode(Node):
    """A `Node` whose `gpus_free` is a stored attribute refreshed on every usage/schedulability change."""

    gpus_free = 0  # shadows the base property; the instance attribute is kept exact by the setters

    @property  # type: ignore[override]
    def gpus_used(self) -> int:
        """GPUs held by pods on this node."""
        return self._used

    @gpus_used.setter
    def gpus_used(self, value: int) -> None:
        self._used = value
        self._refresh()

    @property  # type: ignore[override]
    def schedulable(self) -> bool:
        """Whether new pods may land here."""
        return self._schedulable

    @schedulable.setter
    def schedulable(self, value: bool) -> None:
        self._schedulable = value
        self._refresh()

    def _refresh(self) -> None:
        if "_used" in self.__dict__ and "_schedulable" in self.__dict__:
            before = self.gpus_free
            self.gpus_free = max(self.gpus_total - self._used, 0) if self._schedulable else 0
            histogram = self.__dict__.get("_free_histogram")
            if histogram is not None:
                histogram[before] -= 1
                histogram[self.gpus_free] += 1


class FastTopology(ClusterTopology):
    """A `ClusterTopology` that also answers "how many pods of this size fit" from a free-GPU histogram."""

    def pod_slots(self, pod_gpus: int) -> int:
        """Pods of `pod_gpus` GPUs that fit in the free GPUs of schedulable nodes (from the histogram)."""
        histogram = self._free_histogram  # type: ignore[attr-defined]
        return sum(count * (free // pod_gpus) for free, count in enumerate(histogram) if count and free >= pod_gpus)


def free_pod_slots(topo: ClusterTopology, pod_gpus: int) -> int:
    """Pods of `pod_gpus` GPUs that fit in the free GPUs of `topo`'s schedulable nodes (a necessary condition)."""
    if isinstance(topo, FastTopology):
        return topo.pod_slots(pod_gpus)
    return sum(node.gpus_free // pod_gpus for node in topo.nodes)


def make_fast(topo: ClusterTopology) -> ClusterTopology:
    """Turn `topo` (in place) into a `FastTopology` of `FastNode`s with identical state; returns it."""
    for node in topo.nodes:
        used, schedulable = node.__dict__.pop("gpus_used"), node.__dict__.pop("schedulable")
        node.__class__ = FastNode
        node._used = used
        node.schedulable = schedulable
    histogram = [0] * (max((n.gpus_total for n in topo.nodes), default=0) + 1)
    for node in topo.nodes:
        histogram[node.gpus_free] += 1
        node._free_histogram = histogram  # type: ignore[attr-defined]
    topo.__class__ = FastTopology
    topo._free_histogram = histogram  # type: ignore[attr-defined]
    covered = sum(topo.domains[d].gpus_total for d in topo.root_domain_ids)
    if covered != sum(n.gpus_total for n in topo.nodes):
        raise TopologyError("top-level domains do not cover every node")
    return topo


@dataclass(frozen=True)
class ClusterSpec:
    """How to build the simulated cluster: a preset and node count, or a NodeList file; link overrides."""

    preset: str | None = None
    nodes: int = 0
    path: str | None = None
    links: dict[str, dict[str, float]] = field(default_factory=dict)
    seed: int = 0
    name: str = ""

    def label(self) -> str:
        """Short human name of this cluster."""
        if self.name:
            return self.name
        return f"{self.preset} x {self.nodes}" if self.preset else Path(self.path or "?").name

    def config(self, profile: str | None = None) -> dict[str, Any] | None:
        """Topology config mapping (profile + link overrides), or None when nothing is overridden."""
        cfg: dict[str, Any] = {}
        if profile:
            cfg["profile"] = profile
        if self.links:
            cfg["links"] = {key: dict(value) for key, value in self.links.items()}
        return cfg or None


def build_cluster(spec: ClusterSpec, fast: bool = True) -> ClusterTopology:
    """The topology described by `spec` (TopologyError on bad input)."""
    from topology.generator import generate_nodelist
    from topology.loaders import load_cluster, topology_from_objects
    from topology.presets import get_preset

    if spec.preset:
        if spec.nodes < 1:
            raise TopologyError("--nodes must be at least 1")
        profile = get_preset(spec.preset).link_profile
        items = generate_nodelist(spec.preset, spec.nodes, spec.seed)["items"]
        topo = topology_from_objects(items, spec.config(profile))
    elif spec.path:
        topo = load_cluster(spec.path, spec.config())
    else:
        raise TopologyError("give a cluster file or a preset")
    if topo.gpus_total < 1:
        raise TopologyError(f"cluster {spec.label()} has no GPUs")
    return make_fast(topo) if fast else topo


def gpus_per_node(topo: ClusterTopology) -> int:
    """The largest GPU count of any node (pods are sized to fit it)."""
    return max((n.gpus_total for n in topo.nodes), default=1)


def nvlink_level(topo: ClusterTopology) -> int:
    """Index of the NVLink-domain level (role `nvlink`), else the host level."""
    for index, level in enumerate(topo.levels):
        if level.role == "nvlink":
            return index
    return topo.host_level
