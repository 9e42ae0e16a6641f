"""Render a placed PyTorchJob (kubeflow.org/v1): Master pinned to pod 0's node, Workers to theirs.

A PyTorchJob replica type shares one pod template, so a Worker type with several replicas is
pinned to the set of its nodes (required node affinity) and gets the gang-wide environment; the
training operator supplies the per-pod RANK (= pod index).  A single Worker, like the Master,
is pinned to its exact node and gets its exact rank environment.
"""

from __future__ import annotations

import copy
from typing import Any

from plugins.handoffs.podspec import pod_environment, render_pod_template, shared_environment
from scheduler.handoff.assignment import ANNOTATION_POD_NODES, DEFAULT_MASTER_PORT
from scheduler.placement.result import Placement

NAME = "pytorchjob"
ROLES = ("Master", "Worker")


def master_address(manifest: dict[str, Any]) -> str:
    """The Master pod's service name the training operator creates: `<job>-master-0`."""
    return f"{manifest['metadata']['name']}-master-0"


class PyTorchJobHandoff:
    """Renders a PyTorchJob with node pinning, /dev/shm and the rank environment."""

    name = NAME

    def render(self, manifest: dict[str, Any], placement: Placement,
               master_port: int = DEFAULT_MASTER_PORT) -> list[dict[str, Any]]:
        """The rendered PyTorchJob (one object) for `placement` of this manifest's gang."""
        rendered = copy.deepcopy(manifest)
        specs = rendered["spec"]["pytorchReplicaSpecs"]
        master = master_address(manifest)
        first = 0
        for role in ROLES:
            if role not in specs:
                continue
            replicas = int(specs[role].get("replicas", 1))
            indices = list(range(first, first + replicas))
            nodes = [placement.pod_nodes[i] for i in indices]
            env = (pod_environment(placement, indices[0], master, master_port) if replicas == 1
                   else shared_environment(placement, master, master_port))
            specs[role]["template"] = render_pod_template(
                specs[role]["template"], nodes, env, {ANNOTATION_POD_NODES: ",".join(nodes)})
            first += replicas
        return [rendered]


def factory(**options: object) -> PyTorchJobHandoff:
    """Registry factory."""
    return PyTorchJobHandoff()
