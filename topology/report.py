"""Plain-dict views of a topology: the `meshfit topology show -o json` document and per-level summaries.

`topology_json` follows DESIGN.md exactly (`levels`, `domains`, `nodes`) and adds `scheme`,
`link_profile`, `links` (per level, plus the cluster tier) and `warnings` at the top level and a
`reason` on each node (why it is unschedulable, or null).
"""

from __future__ import annotations

from typing import Any

from topology.model import CLUSTER_TIER, ClusterTopology, LinkTier


def link_json(link: LinkTier) -> dict[str, float]:
    """A link tier as a JSON object."""
    return {"bandwidth_gbps": link.bandwidth_gbps, "latency_us": link.latency_us,
            "oversubscription": link.oversubscription}


def domain_json(topo: ClusterTopology, domain_id: int) -> dict[str, Any]:
    """One domain: level name, domain name, parent domain name, node names, GPU totals."""
    domain = topo.domains[domain_id]
    parent = topo.domains[domain.parent].name if domain.parent is not None else None
    return {"level": topo.levels[domain.level].name, "name": domain.name, "parent": parent,
            "nodes": [topo.nodes[i].name for i in domain.nodes],
            "gpus_total": domain.gpus_total, "gpus_free": domain.gpus_free}


def node_json(topo: ClusterTopology, node_index: int) -> dict[str, Any]:
    """One node: name, GPUs, schedulability (with reason) and its path as {level: domain name}."""
    node = topo.nodes[node_index]
    path = {topo.levels[lvl].name: topo.domains[dom].name for lvl, dom in enumerate(node.path)}
    return {"name": node.name, "gpus_total": node.gpus_total, "gpus_free": node.gpus_free,
            "schedulable": node.schedulable, "path": path, "reason": node.unschedulable_reason}


def topology_json(topo: ClusterTopology) -> dict[str, Any]:
    """The `topology show -o json` document (DESIGN.md contract plus a few extra top-level keys)."""
    links = {level.name: link_json(level.link) for level in topo.levels}
    links[CLUSTER_TIER] = link_json(topo.cluster_link)
    return {
        "levels": [level.name for level in topo.levels],
        "domains": [domain_json(topo, d.id) for d in topo.domains],
        "nodes": [node_json(topo, n.index) for n in topo.nodes],
        "scheme": topo.scheme,
        "link_profile": topo.link_profile,
        "links": links,
        "warnings": list(topo.warnings),
    }


def level_summary(topo: ClusterTopology) -> list[dict[str, Any]]:
    """Per level: name, role, label key, domain count, fallback domains, GPUs total/free, link."""
    rows = []
    for index, level in enumerate(topo.levels):
        domains = topo.domains_at(index)
        rows.append({
            "level": level.name, "role": level.role, "label": level.label_key,
            "domains": len(domains), "fallback_domains": sum(1 for d in domains if d.fallback),
            "gpus_total": sum(d.gpus_total for d in domains), "gpus_free": sum(d.gpus_free for d in domains),
            **link_json(level.link),
        })
    return rows
