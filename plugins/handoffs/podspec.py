"""Pod-template edits every rendered job shares: node pinning, a memory-backed /dev/shm, the rank environment,
and the default scheduler (a rendered job is for clusters without the meshfit extender, so a
`schedulerName: meshfit` would leave its pods Pending)."""

from __future__ import annotations

import copy
from typing import Any

from scheduler.handoff.assignment import DEFAULT_MASTER_PORT, assignment_for_pod
from scheduler.handoff.launch import rank_environment
from scheduler.placement.result import Placement

HOSTNAME_LABEL = "kubernetes.io/hostname"
SHM_VOLUME = "meshfit-dshm"
MESHFIT_SCHEDULER_NAMES = ("meshfit",)
"""`schedulerName` values dropped from rendered templates (the pods go to the default scheduler)."""
POD_SPECIFIC_ENV = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "PET_NODE_RANK", "MESHFIT_POD_INDEX",
                    "MESHFIT_TP_RANK", "MESHFIT_CP_RANK", "MESHFIT_EP_RANK", "MESHFIT_PP_RANK", "MESHFIT_DP_RANK")
"""Variables that differ between pods; a template shared by several pods gets only the rest."""


def pod_environment(placement: Placement, pod_index: int, master_addr: str,
                    master_port: int = DEFAULT_MASTER_PORT) -> dict[str, str]:
    """What `meshfit launch` would set for pod `pod_index` (its first rank, torchrun style)."""
    return rank_environment(assignment_for_pod(placement, pod_index, master_addr, master_port), 0, {})


def shared_environment(placement: Placement, master_addr: str, master_port: int = DEFAULT_MASTER_PORT) -> dict[str, str]:
    """The variables every pod of the gang has in common."""
    env = pod_environment(placement, 0, master_addr, master_port)
    return {key: value for key, value in env.items() if key not in POD_SPECIFIC_ENV}


def _merge_env(container: dict[str, Any], env: dict[str, str]) -> None:
    kept = [item for item in container.get("env") or [] if item.get("name") not in env]
    container["env"] = kept + [{"name": key, "value": value} for key, value in env.items()]


def _add_shm(spec: dict[str, Any]) -> None:
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != SHM_VOLUME]
    spec["volumes"] = volumes + [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    for container in spec.get("containers") or []:
        mounts = [m for m in container.get("volumeMounts") or [] if m.get("mountPath") != "/dev/shm"]
        container["volumeMounts"] = mounts + [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]


def _pin(spec: dict[str, Any], nodes: list[str]) -> None:
    distinct = sorted(set(nodes))
    if len(distinct) == 1:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), HOSTNAME_LABEL: distinct[0]}
        return
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": distinct}]}]}


def render_pod_template(template: dict[str, Any], nodes: list[str], env: dict[str, str],
                        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A copy of `template` pinned to `nodes` (one: nodeSelector; several: required node affinity), with
    /dev/shm in memory, `env` set in every container and no `schedulerName: meshfit`."""
    rendered = copy.deepcopy(template)
    spec = rendered.setdefault("spec", {})
    if spec.get("schedulerName") in MESHFIT_SCHEDULER_NAMES:
        del spec["schedulerName"]
    _pin(spec, nodes)
    _add_shm(spec)
    for container in spec.get("containers") or []:
        _merge_env(container, env)
    if annotations:
        metadata = rendered.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return rendered
