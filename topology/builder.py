"""Build a `ClusterTopology` from plain node records and an ordered list of level specs.

This is the scheme-independent half of the label adapter layer: `topology.schemes` decides which
label keys make which levels; this module turns label values into domains with parents, keeps
nodes that miss a label in clearly named fallback domains, and rejects contradictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.model import ClusterTopology, Domain, Level, LinkTier, Node, TopologyError

HOST_LEVEL = "host"
HOST_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class LevelSpec:
    """A level to build: its name, the label keys that give its value (first present wins), its link."""

    name: str
    label_keys: tuple[str, ...]
    link: LinkTier
    role: str = ""


@dataclass
class NodeRecord:
    """What the builder needs to know about one node."""

    name: str
    gpus_total: int
    labels: dict[str, str] = field(default_factory=dict)
    schedulable: bool = True
    unschedulable_reason: str | None = None


def fallback_name(level: str, node_name: str) -> str:
    """Name of the singleton fallback domain for a node missing the label of `level`."""
    return f"unlabelled-{level}:{node_name}"


def _label_value(record: NodeRecord, spec: LevelSpec) -> str | None:
    for key in spec.label_keys:
        value = record.labels.get(key)
        if value:
            return value
    return None


def _infer_outer_values(values: list[list[str | None]]) -> None:
    """Fill a missing outer value from another node that shares a deeper labelled domain."""
    depth = len(values[0]) if values else 0
    for level in range(depth - 1, -1, -1):
        for deeper in range(level + 1, depth):
            known: dict[str, str] = {}
            for row in values:
                if row[deeper] is not None and row[level] is not None:
                    known.setdefault(row[deeper], row[level])
            for row in values:
                if row[level] is None and row[deeper] is not None and row[deeper] in known:
                    row[level] = known[row[deeper]]


def _check_records(records: list[NodeRecord]) -> None:
    seen: set[str] = set()
    for rec in records:
        if rec.name in seen:
            raise TopologyError(f"duplicate node name {rec.name!r}")
        if rec.gpus_total < 0:
            raise TopologyError(f"node {rec.name}: negative GPU count {rec.gpus_total}")
        seen.add(rec.name)


class _DomainIndex:
    """Domains created so far, keyed by (level, name), rejecting a domain seen under two parents."""

    def __init__(self, levels: list[Level]) -> None:
        self.levels = levels
        self.domains: list[Domain] = []
        self.index: dict[tuple[int, str], int] = {}

    def path_for(self, node_idx: int, rec: NodeRecord, row: list[str | None]) -> tuple[int, ...]:
        """Domain ids of one node, outermost first, creating domains and counting its GPUs."""
        domains, path = self.domains, []
        parent: int | None = None
        for lvl, value in enumerate([*row, rec.name]):
            fallback = value is None
            name = fallback_name(self.levels[lvl].name, rec.name) if fallback else value
            dom_id = self.index.get((lvl, name))
            if dom_id is None:
                dom_id = self.index[(lvl, name)] = len(domains)
                domains.append(Domain(dom_id, lvl, name, parent, fallback=fallback))
                if parent is not None:
                    domains[parent].children.append(dom_id)
            elif domains[dom_id].parent != parent:
                self._contradiction(dom_id, parent, rec.name)
            dom = domains[dom_id]
            dom.nodes.append(node_idx)
            dom.gpus_total += rec.gpus_total
            path.append(dom_id)
            parent = dom_id
        return tuple(path)

    def _contradiction(self, dom_id: int, parent: int | None, node_name: str) -> None:
        dom = self.domains[dom_id]
        have = self.domains[dom.parent].name if dom.parent is not None else None
        want = self.domains[parent].name if parent is not None else None
        raise TopologyError(
            f"contradictory parents: {self.levels[dom.level].name} domain {dom.name!r} is under "
            f"{have!r} for some nodes and {want!r} for node {node_name}")


def build_topology(
    records: list[NodeRecord],
    level_specs: list[LevelSpec],
    host_link: LinkTier,
    cluster_link: LinkTier,
    scheme: str = "custom",
) -> ClusterTopology:
    """Turn node records into a topology; the host level is appended after `level_specs`."""
    _check_records(records)
    levels = [Level(s.name, s.label_keys[0], s.link, s.role, tuple(s.label_keys)) for s in level_specs]
    levels.append(Level(HOST_LEVEL, HOST_LABEL, host_link, HOST_LEVEL, (HOST_LABEL,)))
    values = [[_label_value(rec, spec) for spec in level_specs] for rec in records]
    _infer_outer_values(values)
    warnings: list[str] = []
    domain_index = _DomainIndex(levels)
    nodes: list[Node] = []
    for node_idx, (rec, row) in enumerate(zip(records, values)):
        missing = [level_specs[i].name for i, v in enumerate(row) if v is None]
        if missing:
            warnings.append(f"node {rec.name} lacks labels for level(s) {', '.join(missing)}; "
                            "kept in fallback domain(s)")
        path = domain_index.path_for(node_idx, rec, row)
        nodes.append(Node(node_idx, rec.name, rec.gpus_total, path, rec.schedulable,
                          rec.unschedulable_reason, dict(rec.labels)))
    topo = ClusterTopology(levels, domain_index.domains, nodes, cluster_link, warnings, scheme)
    topo.recompute_free()
    return topo
