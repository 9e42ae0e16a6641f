"""The pods `meshfit submit` sends: what a job's controller would create from its manifest, one per pod index.

Each pod is its pod template (labels, annotations, spec) with a name, a namespace and a fixed UID, plus what
makes it a gang member without any controller object (embedded mode holds none): the `meshfit.io/gang` label
naming the job, `meshfit.io/pod-index` and `meshfit.io/gang-size`, and the job's `meshfit.io/*` / Kueue
annotations (in a real cluster meshfit's gang sources read those from the job object itself).  A pod whose
template carries no GPU request (a TrainJob's `resourcesPerNode`) gets the job's count on its first container.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any, Mapping

from scheduler.handoff.manifest_kinds import gpus_from_template
from scheduler.handoff.manifests import gang_from_manifest, job_pods, merged_annotations
from scheduler.placement.jobs import Gang, JobSpecError

LABEL_GANG = "meshfit.io/gang"
ANNOTATION_POD_INDEX = "meshfit.io/pod-index"
ANNOTATION_GANG_SIZE = "meshfit.io/gang-size"
GPU_RESOURCE = "nvidia.com/gpu"


def pod_uid(namespace: str, name: str) -> str:
    """A UID fixed by the pod's namespace and name: submitting the same job again sends the same pods."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"meshfit-submit/{namespace}/{name}"))


def _template_gpus(template: Mapping[str, Any], where: str) -> int:
    try:
        return gpus_from_template(template, where)
    except JobSpecError:
        return 0


def _with_gpus(spec: dict[str, Any], gpus: int) -> dict[str, Any]:
    """`spec` whose first container requests `gpus` GPUs (a container is added when there is none)."""
    containers = spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": "main", "image": "example"})
    resources = containers[0].setdefault("resources", {})
    for section in ("limits", "requests"):
        resources.setdefault(section, {})[GPU_RESOURCE] = str(gpus)
    return spec


def member_pods(manifest: Mapping[str, Any]) -> tuple[Gang, list[dict[str, Any]]]:
    """The job's gang (as `meshfit place` reads it) and its pods in index order; JobSpecError for a bad manifest."""
    gang = gang_from_manifest(manifest)
    job = job_pods(manifest)
    meta = manifest.get("metadata") or {}
    job_annotations = merged_annotations([("metadata", meta.get("annotations") or {}), *job.annotation_sources])
    pods = []
    for slot, (_, template) in zip(gang.pods, job.pods):
        template = template if isinstance(template, Mapping) else {}
        template_meta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
        spec = copy.deepcopy(dict(template.get("spec") or {}))
        if _template_gpus(template, slot.name) != slot.gpus:
            spec = _with_gpus(spec, slot.gpus)
        labels = {**dict(template_meta.get("labels") or {}), LABEL_GANG: gang.name}
        annotations = {**{str(k): str(v) for k, v in (template_meta.get("annotations") or {}).items()},
                       **job_annotations, ANNOTATION_POD_INDEX: str(slot.index),
                       ANNOTATION_GANG_SIZE: str(len(gang.pods))}
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": slot.name, "namespace": gang.namespace,
                                  "uid": pod_uid(gang.namespace, slot.name), "labels": labels,
                                  "annotations": annotations},
                     "spec": spec, "status": {"phase": "Pending"}})
    return gang, pods
