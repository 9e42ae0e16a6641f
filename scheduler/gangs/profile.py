"""Which pods are meshfit's, and the gang a pod whose membership cannot be read is listed under.

A pod is meshfit's when kube-scheduler schedules it with meshfit's profile (`spec.schedulerName`, see
`manifests/kube-scheduler-config.yaml`) or when it carries a `meshfit.io/*` label or annotation.  A pod
of meshfit's whose gang cannot be read (a typo in a `meshfit.io/*` key, an inconsistent job) is shown
as an `invalid` gang -- by `meshfit gangs` through the kubeconfig and by the service's `GET /gangs` alike --
under its controller's name, else its `meshfit.io/gang` label, else its own name.
"""

from __future__ import annotations

from typing import Any, Iterable

from scheduler.placement.annotation_keys import MESHFIT_PREFIX

SCHEDULER_NAMES = frozenset({"meshfit"})
"""`spec.schedulerName`s of meshfit's kube-scheduler profile (the pods it places, queues and binds)."""
INVALID_STATE = "invalid"
"""The `GET /gangs` state of a gang whose spec cannot be read."""


def _metadata(pod: Any) -> dict:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    return meta if isinstance(meta, dict) else {}


def carries_meshfit_keys(pod: dict) -> bool:
    """Whether the pod has a `meshfit.io/*` label or annotation."""
    meta = _metadata(pod)
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return any(str(key).startswith(MESHFIT_PREFIX) for key in keys)


def is_meshfit_pod(pod: dict, scheduler_names: Iterable[str] = SCHEDULER_NAMES) -> bool:
    """Scheduled by meshfit's profile, or carrying a `meshfit.io/*` label or annotation."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    return (isinstance(spec, dict) and spec.get("schedulerName") in set(scheduler_names)) or carries_meshfit_keys(pod)


def invalid_gang_key(pod: dict) -> str:
    """`namespace/name` of the gang a pod whose membership cannot be read is listed under: its controller, its
    `meshfit.io/gang` label, else the pod itself."""
    meta = _metadata(pod)
    owner = next((ref.get("name") for ref in meta.get("ownerReferences") or []
                  if isinstance(ref, dict) and ref.get("controller")), None)
    name = owner or (meta.get("labels") or {}).get("meshfit.io/gang") or meta.get("name") or "?"
    return f"{meta.get('namespace') or 'default'}/{name}"


def invalid_reason(error: str) -> str:
    """The `GET /gangs` reason of an invalid gang: the hint that it waits until its spec is fixed."""
    return f"not placed until fixed: {error}"
