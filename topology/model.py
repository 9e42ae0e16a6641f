"""The cluster topology model: levels, domains, nodes with coordinate paths, and free-GPU bookkeeping.

A `ClusterTopology` is built once from node records (see `topology.builder`) and then updated
incrementally as pods come and go.  Every node carries a *path*: the id of its domain at every
level, outermost first, so "which tier do these two GPUs share" is a tuple comparison in
O(levels) with no graph search.  The last level is always the host itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from topology.slots import HostsByFree, LevelTree, PodSlots, SlotLog

CLUSTER_TIER = "cluster"
"""Tier name used for traffic between two different top-level domains (no common domain)."""


class TopologyError(ValueError):
    """A cluster description that cannot be turned into a consistent topology."""


@dataclass(frozen=True)
class LinkTier:
    """Link properties for traffic whose smallest common domain is at one level.

    `bandwidth_gbps` is GB/s per GPU per direction, `latency_us` the per-message latency, and
    `oversubscription` the ratio of downlink to uplink capacity of the switch at that level
    (1.0 = non-blocking); traffic crossing an oversubscribed tier gets bandwidth / ratio when
    the uplinks are saturated.
    """

    bandwidth_gbps: float
    latency_us: float
    oversubscription: float = 1.0

    def effective_bandwidth_gbps(self) -> float:
        """Per-GPU bandwidth when every GPU below the switch sends through it at once."""
        return self.bandwidth_gbps / max(self.oversubscription, 1.0)


@dataclass(frozen=True)
class Level:
    """One topology level: a name, the node-label key it was read from, and its link tier.

    `label_keys` lists every key that can give this level's value (e.g. both Topograph
    generations), `role` the kind of link (host, nvlink, leaf, spine, core) its defaults came from.
    """

    name: str
    label_key: str
    link: LinkTier
    role: str = ""
    label_keys: tuple[str, ...] = ()


@dataclass
class Domain:
    """A domain at one level (a spine block, a rack, an NVLink domain, a host)."""

    id: int
    level: int
    name: str
    parent: int | None
    nodes: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    gpus_total: int = 0
    gpus_free: int = 0
    fallback: bool = False


@dataclass
class Node:
    """A Kubernetes node as the scheduler sees it."""

    index: int
    name: str
    gpus_total: int
    path: tuple[int, ...]
    schedulable: bool = True
    unschedulable_reason: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    gpus_used: int = 0

    @property
    def gpus_free(self) -> int:
        """GPUs a new pod could get here (0 on an unschedulable node)."""
        if not self.schedulable:
            return 0
        return max(self.gpus_total - self.gpus_used, 0)


class ClusterTopology:
    """Levels outermost first (the last is the host), domains, nodes, and per-domain free GPUs."""

    def __init__(
        self,
        levels: list[Level],
        domains: list[Domain],
        nodes: list[Node],
        cluster_link: LinkTier,
        warnings: list[str] | None = None,
        scheme: str = "custom",
    ) -> None:
        self.levels = levels
        self.domains = domains
        self.nodes = nodes
        self.cluster_link = cluster_link
        self.warnings = list(warnings or [])
        self.scheme = scheme
        self.link_profile: str | None = None
        """Name of the link-default profile the loader used (see `topology.config`), if any."""
        self.node_by_name: dict[str, Node] = {n.name: n for n in nodes}
        self.pods: dict[str, tuple[int, int]] = {}
        """Pod key -> (node index, GPUs) for every pod or reservation holding GPUs."""
        self._free_arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._slot_log = SlotLog()
        self._pod_slots: dict[int, PodSlots] = {}
        self._hosts_by_free: HostsByFree | None = None
        self.root_domain_ids: list[int] = [d.id for d in domains if d.parent is None]
        """Top-level domains: every node lies under exactly one of them."""

    _DERIVED = ("_free_arrays", "_free_views", "_slot_tree", "_slot_log", "_pod_slots", "_hosts_by_free")
    """Incrementally kept mirrors: not copied or pickled (numpy views would lose their base), rebuilt on use."""

    def __getstate__(self) -> dict:
        state = {key: value for key, value in self.__dict__.items() if key not in self._DERIVED}
        state["_free_arrays"], state["_hosts_by_free"] = None, None
        return state

    # ----- coordinates -------------------------------------------------------------------
    @property
    def host_level(self) -> int:
        """Index of the host level (always the last)."""
        return len(self.levels) - 1

    def level_index(self, name: str) -> int:
        """Index of the level called `name`, whose label key is `name`, else the outermost level of role `name`.

        Roles (`nvlink`, `leaf`, `spine`, `core`) let one manifest name "one spine block" on every
        label scheme; TopologyError with a did-you-mean hint if nothing matches."""
        for i, level in enumerate(self.levels):
            if level.name == name or level.label_key == name or name in level.label_keys:
                return i
        for i, level in enumerate(self.levels):
            if level.role and level.role == name:
                return i
        from topology.strict import did_you_mean

        names = [lv.name for lv in self.levels]
        hint = did_you_mean(name, names + [lv.role for lv in self.levels if lv.role])
        roles = ", ".join(f"{lv.name}={lv.role}" for lv in self.levels if lv.role)
        raise TopologyError(f"unknown topology level {name!r}{hint} (levels: {', '.join(names)}; roles: {roles})")

    def common_level(self, a: int, b: int) -> int:
        """Deepest level at which nodes `a` and `b` share a domain; -1 if none (cluster tier)."""
        pa, pb = self.nodes[a].path, self.nodes[b].path
        for i, (da, db) in enumerate(zip(pa, pb)):
            if da != db:
                return i - 1
        return len(pa) - 1

    def group_level(self, node_indices: list[int] | tuple[int, ...]) -> int:
        """Deepest level whose single domain contains all the given nodes; -1 if none."""
        first = self.nodes[node_indices[0]].path
        deepest = len(first) - 1
        for idx in node_indices[1:]:
            deepest = min(deepest, self.common_level(node_indices[0], idx))
            if deepest < 0:
                return -1
        return deepest

    def tier_name(self, level: int) -> str:
        """Human name of the tier at `level` (-1 is the cluster tier)."""
        return CLUSTER_TIER if level < 0 else self.levels[level].name

    def tier_link(self, level: int) -> LinkTier:
        """Link properties for traffic whose smallest common domain is at `level`."""
        return self.cluster_link if level < 0 else self.levels[level].link

    def domain_of(self, node: int, level: int) -> Domain:
        """The domain containing node `node` at `level`."""
        return self.domains[self.nodes[node].path[level]]

    def domains_at(self, level: int) -> list[Domain]:
        """All domains of one level."""
        return [d for d in self.domains if d.level == level]

    # ----- capacity ----------------------------------------------------------------------
    def free_gpus_by_domain(self) -> dict[int, int]:
        """Domain id -> free GPUs, as maintained incrementally."""
        return {d.id: d.gpus_free for d in self.domains}

    def free_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(free GPUs per node index, free GPUs per domain id), kept up to date incrementally; read-only."""
        if getattr(self, "_free_arrays", None) is None:
            nodes = np.fromiter((n.gpus_free for n in self.nodes), dtype=np.int64, count=len(self.nodes))
            domains = np.fromiter((d.gpus_free for d in self.domains), dtype=np.int64, count=len(self.domains))
            self._free_arrays = (nodes, domains)
            views = tuple(array.view() for array in self._free_arrays)  # read-only views of the live arrays
            for view in views:
                view.flags.writeable = False
            self._free_views = views
        return self._free_views

    def slots_for_pods(self, gpus_per_pod: int) -> PodSlots:
        """Free slots for pods of `gpus_per_pod` GPUs per node and per domain, kept incrementally (read-only)."""
        node_free = self.free_arrays()[0]
        tree = self._level_tree()
        slots = self._pod_slots.get(gpus_per_pod)
        if slots is None or slots.tree is not tree:
            slots = self._pod_slots[gpus_per_pod] = PodSlots(gpus_per_pod, tree, node_free, self._node_totals(),
                                                             self._slot_log)
        else:
            slots.catch_up(node_free)
        return slots

    def hosts_by_free(self) -> HostsByFree:
        """Hosts grouped by free GPUs, brought up to date when asked for (read-only)."""
        tree = self._level_tree()
        node_free = self.free_arrays()[0]
        hosts = getattr(self, "_hosts_by_free", None)
        if hosts is None or hosts.tree is not tree or not hosts.catch_up(node_free):
            hosts = self._hosts_by_free = HostsByFree(tree, node_free, self._node_totals(), self._slot_log)
        return hosts

    def _level_tree(self) -> LevelTree:
        """The static tree as level arrays (rebuilt, with everything derived from it, if nodes or domains changed)."""
        tree = getattr(self, "_slot_tree", None)
        if tree is None or tree.paths.shape[0] != len(self.nodes) or tree.domains != len(self.domains):
            paths = np.array([n.path for n in self.nodes], dtype=np.int64).reshape(len(self.nodes), len(self.levels))
            levels = np.array([d.level for d in self.domains], dtype=np.int64)
            parents = np.array([-1 if d.parent is None else d.parent for d in self.domains], dtype=np.int64)
            tree = self._slot_tree = LevelTree(paths, levels, parents)
            self._slot_log, self._pod_slots, self._hosts_by_free = SlotLog(), {}, None
        return tree

    def _node_totals(self) -> np.ndarray:
        """GPUs per node index (schedulable or not)."""
        return np.fromiter((n.gpus_total for n in self.nodes), dtype=np.int64, count=len(self.nodes))

    def _propagate(self, node: Node, change: int) -> None:
        """Add `change` free GPUs to the node's domains (and the numpy mirrors when they exist)."""
        for domain_id in node.path:
            self.domains[domain_id].gpus_free += change
        if getattr(self, "_free_arrays", None) is not None:
            nodes, domains = self._free_arrays
            nodes[node.index] += change
            for domain_id in node.path:
                domains[domain_id] += change
        if getattr(self, "_pod_slots", None) or getattr(self, "_hosts_by_free", None) is not None:
            self._slot_log.record(node.index)

    def _adjust(self, node: Node, used_delta: int) -> None:
        before = node.gpus_free
        node.gpus_used += used_delta
        change = node.gpus_free - before
        if change:
            self._propagate(node, change)

    def add_pod(self, key: str, node_name: str, gpus: int) -> None:
        """Record that pod (or reservation) `key` holds `gpus` GPUs on `node_name`."""
        if key in self.pods:
            self.remove_pod(key)
        node = self.node_by_name.get(node_name)
        if node is None:
            raise TopologyError(f"pod {key} is on unknown node {node_name!r}")
        if gpus < 0:
            raise TopologyError(f"pod {key} requests a negative GPU count ({gpus})")
        self.pods[key] = (node.index, gpus)
        self._adjust(node, gpus)

    def remove_pod(self, key: str) -> bool:
        """Release the GPUs of pod `key`; returns False if it was not known (idempotent)."""
        entry = self.pods.pop(key, None)
        if entry is None:
            return False
        self._adjust(self.nodes[entry[0]], -entry[1])
        return True

    def set_schedulable(self, node_name: str, schedulable: bool, reason: str | None = None) -> None:
        """Mark a node (un)schedulable, e.g. on failure or repair, keeping domain totals right."""
        node = self.node_by_name[node_name]
        before = node.gpus_free
        node.schedulable = schedulable
        node.unschedulable_reason = None if schedulable else (reason or "unschedulable")
        change = node.gpus_free - before
        if change:
            self._propagate(node, change)

    @property
    def gpus_total(self) -> int:
        """GPUs on all nodes, schedulable or not."""
        return sum(n.gpus_total for n in self.nodes)

    @property
    def gpus_free(self) -> int:
        """GPUs free on schedulable nodes (sum over the top-level domains, each kept incrementally)."""
        return sum(self.domains[d].gpus_free for d in self.root_domain_ids)

    def snapshot_usage(self) -> tuple[dict[str, tuple[int, int]], list[int], list[bool]]:
        """Copy of the mutable state, to restore after a what-if (see `restore_usage`)."""
        return dict(self.pods), [n.gpus_used for n in self.nodes], [n.schedulable for n in self.nodes]

    def restore_usage(self, snap: tuple[dict[str, tuple[int, int]], list[int], list[bool]]) -> None:
        """Restore a `snapshot_usage` copy and recompute domain free counts."""
        pods, used, sched = snap
        self.pods = dict(pods)
        for node, u, s in zip(self.nodes, used, sched):
            node.gpus_used, node.schedulable = u, s
        self.recompute_free()

    def recompute_free(self) -> None:
        """Recompute every domain's free GPUs from the nodes (O(nodes x levels))."""
        self._free_arrays = None
        self._pod_slots, self._hosts_by_free = {}, None
        for d in self.domains:
            d.gpus_free = 0
        for node in self.nodes:
            for domain_id in node.path:
                self.domains[domain_id].gpus_free += node.gpus_free

    def check_invariants(self) -> None:
        """Raise AssertionError if incremental counts disagree with a recomputation."""
        expected = {d.id: 0 for d in self.domains}
        for node in self.nodes:
            assert 0 <= node.gpus_used, f"{node.name} has negative usage"
            for domain_id in node.path:
                expected[domain_id] += node.gpus_free
        for d in self.domains:
            assert d.gpus_free == expected[d.id], f"domain {d.name}: {d.gpus_free} != {expected[d.id]}"
