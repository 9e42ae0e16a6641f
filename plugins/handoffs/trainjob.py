"""Render a placed TrainJob (trainer.kubeflow.org/v1alpha1) through `spec.podSpecOverrides`.

TrainJob v1alpha1 overrides apply to every pod of a target job and offer `nodeSelector` but no
affinity, so a gang on one node is pinned exactly (hostname nodeSelector); a gang over several
nodes is pinned only as far as a node label shared by all of them allows (`pin_labels`, e.g.
the common rack or block label the caller resolves from the cluster), and the chosen node list
is recorded in the `meshfit.io/pod-nodes` annotation.  /dev/shm and the gang-wide environment
are added to the `node` job's trainer container; the runtime supplies the per-pod node rank.
"""

from __future__ import annotations

import copy
from typing import Any

from plugins.handoffs.podspec import HOSTNAME_LABEL, SHM_VOLUME, shared_environment
from scheduler.handoff.assignment import ANNOTATION_POD_NODES, DEFAULT_MASTER_PORT
from scheduler.placement.result import Placement

NAME = "trainjob"
TARGET_JOB = "node"
TRAINER_CONTAINER = "node"


def master_address(manifest: dict[str, Any]) -> str:
    """The first node pod's DNS name in the JobSet the trainer controller derives."""
    name = manifest["metadata"]["name"]
    return f"{name}-{TARGET_JOB}-0-0.{name}"


class TrainJobHandoff:
    """Renders a TrainJob with a podSpecOverride for the trainer nodes."""

    name = NAME

    def render(self, manifest: dict[str, Any], placement: Placement, master_port: int = DEFAULT_MASTER_PORT,
               pin_labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The rendered TrainJob (one object) for `placement` of this manifest's gang."""
        rendered = copy.deepcopy(manifest)
        spec = rendered["spec"]
        nodes = list(placement.pod_nodes)
        selector = {HOSTNAME_LABEL: nodes[0]} if len(set(nodes)) == 1 else dict(pin_labels or {})
        env = shared_environment(placement, master_address(manifest), master_port)
        override: dict[str, Any] = {
            "targetJobs": [{"name": TARGET_JOB}],
            "containers": [{"name": TRAINER_CONTAINER, "env": [{"name": k, "value": v} for k, v in env.items()],
                            "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]}],
            "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}],
        }
        if selector:
            override["nodeSelector"] = selector
        spec["podSpecOverrides"] = [*(spec.get("podSpecOverrides") or []), override]
        annotations = rendered["metadata"].setdefault("annotations", {})
        annotations[ANNOTATION_POD_NODES] = ",".join(nodes)
        return [rendered]


def factory(**options: object) -> TrainJobHandoff:
    """Registry factory."""
    return TrainJobHandoff()
