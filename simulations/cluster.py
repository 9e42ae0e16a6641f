"""Clusters to simulate on: a picklable spec (preset + nodes + link overrides, or a file) and its topology.

The topology handed to the engine is the ordinary `ClusterTopology`, with one bookkeeping-only
speed-up for long simulations (`make_fast`): each node's `gpus_free` becomes a plain attribute kept
in sync whenever `gpus_used` or `schedulable` is assigned, the cluster's free total is summed over
the top-level domains instead of every node, a histogram of nodes by free GPUs is kept so the
simulator can count free pod slots (`free_pod_slots`) without walking every node, and numpy arrays
of every node's used GPUs and schedulability (`node_state`) are kept in step for the sampler.
Every policy reads the same values it would read from the base classes (tests check this); only
the cost of reading them changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from topology.model import ClusterTopology, Node, TopologyError

if TYPE_CHECKING:
    from topology.hardware import GpuGeneration


@dataclass
class FastState:
    """Per-node bookkeeping shared by a `FastTopology` and its nodes, kept exact by the node setters."""

    used: np.ndarray
    """GPUs used per node index."""
    up: np.ndarray
    """Schedulable per node index."""
    histogram: list[int]
    """Number of nodes per free-GPU count."""


class FastNode(Node):
    """A `Node` whose `gpus_free` is a stored attribute refreshed on every usage/schedulability change."""

    gpus_free = 0  # shadows the base property; the instance attribute is kept exact by the setters
    _shared: FastState

    @property  # type: ignore[override]
    def gpus_used(self) -> int:
        """GPUs held by pods on this node."""
        return self._used

    @gpus_used.setter
    def gpus_used(self, value: int) -> None:
        self._used = value
        self._shared.used[self.index] = value
        self._refresh()

    @property  # type: ignore[override]
    def schedulable(self) -> bool:
        """Whether new pods may land here."""
        return self._schedulable

    @schedulable.setter
    def schedulable(self, value: bool) -> None:
        self._schedulable = value
        self._shared.up[self.index] = value
        self._refresh()

    def _refresh(self) -> None:
        before = self.gpus_free
        after = max(self.gpus_total - self._used, 0) if self._schedulable else 0
        if after != before:
            self.gpus_free = after
            histogram = self._shared.histogram
            histogram[before] -= 1
            histogram[after] += 1


class FastTopology(ClusterTopology):
    """A `ClusterTopology` that also answers "how many pods of this size fit" from a free-GPU histogram."""

    _fast: FastState

    def pod_slots(self, pod_gpus: int) -> int:
        """Pods of `pod_gpus` GPUs that fit in the free GPUs of schedulable nodes (from the histogram)."""
        histogram = self._fast.histogram
        return sum(count * (free // pod_gpus) for free, count in enumerate(histogram) if count and free >= pod_gpus)


def node_state(topo: ClusterTopology) -> tuple[np.ndarray, np.ndarray]:
    """(GPUs used per node index, schedulable per node index): live arrays on a `FastTopology`, else fresh copies."""
    if isinstance(topo, FastTopology):
        return topo._fast.used, topo._fast.up
    used = np.fromiter((n.gpus_used for n in topo.nodes), dtype=np.int64, count=len(topo.nodes))
    up = np.fromiter((n.schedulable for n in topo.nodes), dtype=bool, count=len(topo.nodes))
    return used, up


def all_schedulable(topo: ClusterTopology) -> bool:
    """True if every node of `topo` accepts new pods."""
    return bool(node_state(topo)[1].all())


def free_pod_slots(topo: ClusterTopology, pod_gpus: int) -> int:
    """Pods of `pod_gpus` GPUs that fit in the free GPUs of `topo`'s schedulable nodes (a necessary condition)."""
    if isinstance(topo, FastTopology):
        return topo.pod_slots(pod_gpus)
    return sum(node.gpus_free // pod_gpus for node in topo.nodes)


def make_fast(topo: ClusterTopology) -> ClusterTopology:
    """Turn `topo` (in place) into a `FastTopology` of `FastNode`s with identical state; returns it."""
    used, up = node_state(topo)
    state = FastState(used, up, [0] * (max((n.gpus_total for n in topo.nodes), default=0) + 1))
    for node in topo.nodes:
        used_gpus, schedulable = node.__dict__.pop("gpus_used"), node.__dict__.pop("schedulable")
        node.__class__ = FastNode
        node._used, node._schedulable, node._shared = used_gpus, schedulable, state
        node.gpus_free = max(node.gpus_total - used_gpus, 0) if schedulable else 0
        state.histogram[node.gpus_free] += 1
    topo.__class__ = FastTopology
    topo._fast = state  # type: ignore[attr-defined]
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
    gpu: str | None = None
    """GPU generation (`topology.hardware.GENERATIONS`); None = the one the nodes' `nvidia.com/gpu.product` names."""
    gpu_figures: tuple[tuple[str, float], ...] = ()
    """Figures of that generation replaced for this cluster (`GpuGeneration.with_overrides`)."""
    mfu: float | None = None
    """Model FLOPs utilisation on this cluster's GPUs; None = the run's `RuntimeModel.mfu`."""

    def hardware(self, topo: ClusterTopology) -> "GpuGeneration | None":
        """The GPU generation of this cluster (with its overrides); None when nothing names a known one."""
        from topology.hardware import DEFAULT_GENERATION, cluster_generation, get_generation

        base = get_generation(self.gpu) if self.gpu else cluster_generation(n.labels for n in topo.nodes)
        if self.gpu_figures:
            base = (base or get_generation(DEFAULT_GENERATION)).with_overrides(dict(self.gpu_figures))
        return base

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
