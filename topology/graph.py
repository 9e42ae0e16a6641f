"""The topology as a networkx tree (cluster -> domains ... -> node -> GPU) for validation, export and drawing.

Vertex ids: `cluster`, `<level>:<domain>` for every domain above the host, `node:<name>` for a node
(its host-level domain), `gpu:<node>/<i>` for each GPU.  Each edge carries the link tier that
traffic between the child and the rest of the parent's subtree crosses (`tier`, `bandwidth_gbps`,
`latency_us`, `oversubscription`).  The hot path never uses this graph: see `ClusterTopology`.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from topology.model import CLUSTER_TIER, ClusterTopology, LinkTier

if TYPE_CHECKING:
    import networkx as nx

ROOT = "cluster"


def vertex_id(topo: ClusterTopology, domain_id: int) -> str:
    """Graph vertex id of a domain (host-level domains map to their node's vertex)."""
    domain = topo.domains[domain_id]
    if domain.level == topo.host_level:
        return f"node:{domain.name}"
    return f"{topo.levels[domain.level].name}:{domain.name}"


def _edge_attrs(tier: str, link: LinkTier) -> dict[str, Any]:
    return {"tier": tier, "bandwidth_gbps": link.bandwidth_gbps, "latency_us": link.latency_us,
            "oversubscription": link.oversubscription}


def _add_domains(graph: nx.DiGraph, topo: ClusterTopology) -> None:
    for domain in topo.domains:
        vid = vertex_id(topo, domain.id)
        level = topo.levels[domain.level]
        if domain.level == topo.host_level:
            node = topo.nodes[domain.nodes[0]]
            graph.add_node(vid, kind="node", level=level.name, name=node.name, gpus_total=node.gpus_total,
                           gpus_free=node.gpus_free, schedulable=node.schedulable,
                           reason=node.unschedulable_reason or "")
        else:
            graph.add_node(vid, kind="domain", level=level.name, name=domain.name, gpus_total=domain.gpus_total,
                           gpus_free=domain.gpus_free, fallback=domain.fallback)
        if domain.parent is None:
            graph.add_edge(ROOT, vid, **_edge_attrs(CLUSTER_TIER, topo.cluster_link))
        else:
            parent_level = topo.levels[topo.domains[domain.parent].level]
            graph.add_edge(vertex_id(topo, domain.parent), vid, **_edge_attrs(parent_level.name, parent_level.link))


def to_graph(topo: ClusterTopology, gpus: bool = True) -> nx.DiGraph:
    """A directed tree rooted at `cluster`; with `gpus`, one leaf vertex per GPU under each node."""
    import networkx as nx

    graph = nx.DiGraph(scheme=topo.scheme, levels=",".join(lv.name for lv in topo.levels))
    graph.add_node(ROOT, kind="cluster", level=CLUSTER_TIER, name=ROOT, gpus_total=topo.gpus_total,
                   gpus_free=topo.gpus_free)
    _add_domains(graph, topo)
    if gpus:
        host = topo.levels[topo.host_level]
        for node in topo.nodes:
            for i in range(node.gpus_total):
                gid = f"gpu:{node.name}/{i}"
                graph.add_node(gid, kind="gpu", level="gpu", name=f"{node.name}/{i}")
                graph.add_edge(f"node:{node.name}", gid, **_edge_attrs(host.name, host.link))
    return graph


def validate_graph(topo: ClusterTopology) -> list[str]:
    """Structural problems found through the graph (not a tree, paths or GPU sums disagree); [] when sound."""
    import networkx as nx

    graph = to_graph(topo, gpus=False)
    problems = [] if nx.is_arborescence(graph) else ["topology graph is not a tree rooted at 'cluster'"]
    for node in topo.nodes:
        ancestors = nx.shortest_path(graph, ROOT, f"node:{node.name}")[1:]
        expected = [vertex_id(topo, d) for d in node.path]
        if ancestors != expected:
            problems.append(f"node {node.name}: graph path {ancestors} != coordinate path {expected}")
    for vid, data in graph.nodes(data=True):
        children = list(graph.successors(vid))
        if data["kind"] in ("cluster", "domain") and children:
            below = sum(graph.nodes[c]["gpus_total"] for c in children)
            if below != data["gpus_total"]:
                problems.append(f"{vid}: gpus_total {data['gpus_total']} != sum of children {below}")
    return problems


def write_graphml(topo: ClusterTopology, target: str | Path | IO[bytes], gpus: bool = True) -> None:
    """Write the graph as GraphML (readable by networkx, Gephi, yEd)."""
    import networkx as nx

    nx.write_graphml(to_graph(topo, gpus), target)


def _dot_quote(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def dot_text(topo: ClusterTopology, gpus: bool = False) -> str:
    """The graph in Graphviz DOT (written directly; pydot/pygraphviz are not needed)."""
    graph = to_graph(topo, gpus)
    lines = ["digraph meshfit {", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    shapes = {"cluster": "doubleoctagon", "domain": "box", "node": "component", "gpu": "circle"}
    for vid, data in graph.nodes(data=True):
        label = data["name"] if data["kind"] == "gpu" else (
            f"{data['level']}: {data['name']}\n{data['gpus_free']}/{data['gpus_total']} GPUs free")
        style = ', style=dashed' if data.get("fallback") or data.get("schedulable") is False else ""
        lines.append(f"  {_dot_quote(vid)} [label={_dot_quote(label)}, shape={shapes[data['kind']]}{style}];")
    for parent, child, data in graph.edges(data=True):
        label = f"{data['tier']} {data['bandwidth_gbps']:g} GB/s"
        lines.append(f"  {_dot_quote(parent)} -> {_dot_quote(child)} [label={_dot_quote(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
