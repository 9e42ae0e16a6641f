"""Load a cluster from a Kubernetes `NodeList` / `List` file or from already-decoded objects.

The file is what `kubectl get nodes -o json` (or `kubectl get nodes,pods -A -o yaml`) prints: a
`NodeList`, or a `List` mixing Nodes, Pods (bound, unfinished pods consume GPUs) and optionally a
Kueue or KAI `Topology` or Volcano `HyperNode`s that fix the levels explicitly.  Multi-document YAML
of such objects is accepted too.  Every problem is a `TopologyError` with a one-line message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from topology.builder import LevelSpec, NodeRecord, build_topology
from topology.config import TopologyConfig, as_config, detect_profile
from topology.explicit import apply_hypernodes, is_hypernode, is_topology_object, levels_from_topology
from topology.k8s import (
    Toleration,
    node_gpu_count,
    node_record_from_k8s,
    parse_toleration,
    pod_gpu_request,
    pod_holds_node,
    pod_key,
)
from topology.model import ClusterTopology, TopologyError
from topology.schemes import DetectedLevel, detect_levels, levels_from_label_keys
from topology.textfile import decode_text, read_text

__all__ = ["load_cluster", "node_record_from_k8s", "read_objects", "topology_from_objects"]

ConfigLike = TopologyConfig | Mapping[str, Any] | str | Path | None
TolerationLike = str | Mapping[str, Any] | Toleration


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def decode_documents(data: bytes | str, source: str) -> list[Any]:
    """Decode JSON (fast path, msgspec) or YAML (possibly several documents) into Python objects; bytes must be
    text as `topology.textfile` reads it (UTF-8, or UTF-16/32 with a byte-order mark)."""
    text = decode_text(data, source, TopologyError) if isinstance(data, bytes) else data
    stripped = text.lstrip()
    if not stripped:
        raise TopologyError(f"{source} is empty")
    if stripped[:1] in ("{", "["):
        import msgspec

        try:
            return [msgspec.json.decode(text)]
        except msgspec.DecodeError as exc:
            raise TopologyError(f"{source} is not valid JSON: {_one_line(exc)}") from None
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "syntax error"
        raise TopologyError(f"{source} is not valid JSON or YAML{where}: {_one_line(problem)}") from None


def _describe(doc: Any) -> str:
    if isinstance(doc, Mapping):
        return f"kind {doc.get('kind')!r}" if doc.get("kind") else "a mapping without kind"
    return f"a {type(doc).__name__}"


def _list_items(doc: Mapping[str, Any], source: str) -> list[Any]:
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise TopologyError(f"{source}: {doc.get('kind')}.items is not a list")
    item_kind = str(doc["kind"])[: -len("List")] or None
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            raise TopologyError(f"{source}: a {doc.get('kind')} item is not an object")
        out.append(item if item.get("kind") or not item_kind else {**item, "kind": item_kind})
    return out


def flatten_documents(docs: list[Any], source: str) -> list[Mapping[str, Any]]:
    """Objects from decoded documents: one `*List`, or several documents each a List or an object."""
    if not docs:
        raise TopologyError(f"{source} holds no objects (expected a NodeList or List)")
    is_list = [isinstance(d, Mapping) and str(d.get("kind") or "").endswith("List") for d in docs]
    if len(docs) == 1 and not is_list[0]:
        raise TopologyError(f"{source}: expected a NodeList or List, got {_describe(docs[0])}")
    objects: list[Mapping[str, Any]] = []
    for doc, listed in zip(docs, is_list):
        if listed:
            objects.extend(_list_items(doc, source))
        elif isinstance(doc, Mapping) and doc.get("kind"):
            objects.append(doc)
        else:
            raise TopologyError(f"{source}: expected a NodeList, List or Kubernetes object, got {_describe(doc)}")
    return objects


def read_objects(path: str | Path) -> list[Mapping[str, Any]]:
    """All Kubernetes objects in a JSON or YAML file (Lists flattened)."""
    source = str(path)
    text = read_text(path, "cluster file", TopologyError)
    return flatten_documents(decode_documents(text, source), source)


def _explicit_levels(
    cfg: TopologyConfig, topologies: list[Mapping[str, Any]], hypernodes: list[Mapping[str, Any]],
    labels_by_node: dict[str, dict[str, str]], warnings: list[str],
) -> tuple[str, list[DetectedLevel]] | None:
    """Levels fixed by the config, a Kueue/KAI Topology or Volcano HyperNodes (in that order), or None."""
    if cfg.levels:
        levels = levels_from_label_keys([lv.label for lv in cfg.levels])
        named = []
        for override, level in zip(cfg.levels, levels):
            named.append(DetectedLevel(override.name or level.name, override.role or level.role, level.keys))
        return "config", named
    if topologies:
        chosen = max(topologies, key=lambda t: _topology_coverage(t, labels_by_node))
        if len(topologies) > 1:
            warnings.append(f"{len(topologies)} Topology objects given; using "
                            f"{(chosen.get('metadata') or {}).get('name')!r}, which most nodes match")
        if hypernodes:
            warnings.append("HyperNode objects ignored: a Topology object fixes the levels")
        kind = "kueue" if str(chosen.get("apiVersion", "")).startswith("kueue") else "kai"
        return f"{kind}:{(chosen.get('metadata') or {}).get('name', '?')}", levels_from_topology(chosen)
    if hypernodes:
        return "volcano-hypernode", apply_hypernodes(hypernodes, labels_by_node)
    return None


def _topology_coverage(topology: Mapping[str, Any], labels_by_node: dict[str, dict[str, str]]) -> int:
    keys = [lv.keys[0] for lv in levels_from_topology(topology)]
    return sum(1 for labels in labels_by_node.values() for key in keys if key in labels)


def _node_records(
    nodes: list[Mapping[str, Any]], tolerations: list[Toleration], cfg: TopologyConfig, warnings: list[str],
) -> list[NodeRecord]:
    records, skipped = [], 0
    for node in nodes:
        if node_gpu_count(node, cfg.gpu_resources) is None:
            skipped += 1
            continue
        records.append(node_record_from_k8s(node, tolerations, cfg.gpu_resources))
    if skipped:
        warnings.append(f"ignored {skipped} node(s) without {' or '.join(cfg.gpu_resources)}")
    if not records:
        raise TopologyError(f"no node has a GPU resource ({', '.join(cfg.gpu_resources)})")
    return records


def _apply_pods(topo: ClusterTopology, pods: list[Mapping[str, Any]], cfg: TopologyConfig) -> None:
    unknown = 0
    for pod in pods:
        node_name = pod_holds_node(pod)
        if node_name is None:
            continue
        gpus = pod_gpu_request(pod, cfg.gpu_resources)
        if gpus == 0:
            continue
        if node_name not in topo.node_by_name:
            unknown += 1
            continue
        topo.add_pod(pod_key(pod), node_name, gpus)
    if unknown:
        topo.warnings.append(f"ignored {unknown} GPU pod(s) bound to nodes not in the cluster file")
    for node in topo.nodes:
        if node.gpus_used > node.gpus_total:
            topo.warnings.append(f"node {node.name}: pods use {node.gpus_used} GPUs but only "
                                 f"{node.gpus_total} are allocatable")


def _split_objects(objects: Iterable[Any]) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {"Node": [], "Pod": [], "Topology": [], "HyperNode": []}
    for obj in objects:
        if not isinstance(obj, Mapping):
            raise TopologyError(f"expected Kubernetes objects, got a {type(obj).__name__}")
        kind = obj.get("kind")
        if kind in ("Node", "Pod") and obj.get("apiVersion", "v1") == "v1":
            groups[kind].append(obj)
        elif is_topology_object(obj):
            groups["Topology"].append(obj)
        elif is_hypernode(obj):
            groups["HyperNode"].append(obj)
    if not groups["Node"]:
        raise TopologyError("no Node objects found (expected a NodeList, or a List containing Nodes)")
    return groups


def topology_from_objects(
    objects: Iterable[Mapping[str, Any]],
    config: ConfigLike = None,
    tolerations: Iterable[TolerationLike] = (),
) -> ClusterTopology:
    """Build a `ClusterTopology` from decoded Kubernetes objects (Nodes, Pods, Topology, HyperNodes)."""
    cfg = as_config(config)
    groups = _split_objects(objects)
    warnings: list[str] = []
    records = _node_records(groups["Node"], [parse_toleration(t) for t in tolerations], cfg, warnings)
    labels_by_node = {rec.name: rec.labels for rec in records}
    explicit = _explicit_levels(cfg, groups["Topology"], groups["HyperNode"], labels_by_node, warnings)
    scheme, levels = explicit if explicit else detect_levels([rec.labels for rec in records])
    if not levels:
        warnings.append("no topology level above the host: every node is its own top-level domain"
                        if explicit else "no topology labels found: every node is its own top-level domain")
    profile = cfg.profile or detect_profile([rec.labels for rec in records], scheme)
    cfg.check_link_keys([lv.name for lv in levels], [lv.role for lv in levels])
    specs = [LevelSpec(lv.name, lv.keys, cfg.link_for(profile, lv.name, lv.role), lv.role) for lv in levels]
    topo = build_topology(records, specs, cfg.link_for(profile, "host", "host"),
                          cfg.link_for(profile, "cluster", "cluster"), scheme)
    topo.link_profile = profile
    topo.warnings[:0] = warnings
    _apply_pods(topo, groups["Pod"], cfg)
    return topo


def load_cluster(
    path: str | Path,
    config: ConfigLike = None,
    tolerations: Iterable[TolerationLike] = (),
) -> ClusterTopology:
    """Read a NodeList / List file (JSON or YAML) and build its `ClusterTopology`."""
    return topology_from_objects(read_objects(path), config, tolerations)

