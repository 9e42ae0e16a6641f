"""Shared test builders with defaults: clusters, NodeLists, single Nodes and Pods as plain dicts.

Typical use::

    from tests.builders import make_cluster, make_node, make_pod, make_list, write_objects

    topo = make_cluster()                                    # 16 x 8-GPU hgx-h100 nodes, all free
    topo = make_cluster("gb200-nvl72", nodes=36, used_fraction=0.3, seed=1)
    nodes = [make_node(f"n{i}", labels={"network.topology.nvidia.com/leaf": f"l{i // 2}"}) for i in range(4)]
    path = write_objects(tmp_path, make_list(*nodes, make_pod("p", "n0", gpus=4)))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from topology.generator import generate_cluster, generate_nodelist
from topology.loaders import topology_from_objects
from topology.model import ClusterTopology


def make_nodelist(preset: str = "hgx-h100", nodes: int = 16, seed: int = 0,
                  used_fraction: float = 0.0, unhealthy: int = 0) -> dict[str, Any]:
    """A generated NodeList (a List with running Pods when `used_fraction > 0`) for a preset."""
    return generate_nodelist(preset, nodes, seed, used_fraction, unhealthy)


def make_cluster(preset: str = "hgx-h100", nodes: int = 16, seed: int = 0,
                 used_fraction: float = 0.0, unhealthy: int = 0) -> ClusterTopology:
    """A generated `ClusterTopology` with the preset's default links (deterministic per seed)."""
    return generate_cluster(preset, nodes, seed, used_fraction, unhealthy)


def make_node(name: str, gpus: int | str = 8, labels: dict[str, str] | None = None, ready: bool = True,
              unschedulable: bool = False, taints: list[dict[str, str]] | None = None,
              resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """One Kubernetes Node dict with `gpus` allocatable GPUs (a string passes through unparsed)."""
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = list(taints)
    quantity = gpus if isinstance(gpus, str) else str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": spec,
            "status": {"capacity": {resource: quantity}, "allocatable": {resource: quantity},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def make_pod(name: str, node: str | None, gpus: int = 8, namespace: str = "default",
             phase: str = "Running", resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """One Pod dict bound to `node` (None = unbound) requesting `gpus` GPUs in a single container."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {
        "requests": {resource: str(gpus)}, "limits": {resource: str(gpus)}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec, "status": {"phase": phase}}


def make_list(*items: dict[str, Any]) -> dict[str, Any]:
    """A `v1 List` wrapping the given objects (Nodes, Pods, Topology, HyperNodes)."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def cluster_from(*items: dict[str, Any], config: Any = None, tolerations: tuple = ()) -> ClusterTopology:
    """A `ClusterTopology` built from hand-made objects (see `make_node` / `make_pod`)."""
    return topology_from_objects(list(items), config, tolerations)


def write_objects(directory: Path, document: dict[str, Any], name: str = "cluster.json") -> Path:
    """Write a List / NodeList as JSON (or YAML when `name` ends in .yaml) and return its path."""
    path = Path(directory) / name
    if path.suffix in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(document), encoding="utf-8")
    return path
