"""`meshfit place` warnings: what would keep the job from reaching meshfit once it is applied.

- a pod template whose `schedulerName` is missing or not one of meshfit's profile names
  (`scheduler.gangs.profile.SCHEDULER_NAMES`; for Volcano Jobs also `volcano`, which calls meshfit as its
  extender): kube-scheduler's default profile places such pods and never asks meshfit;
- a field Kubernetes does not know (`schedulerNmae`, `completion` in a batch/v1 Job): kubectl rejects it or
  the API server drops it.  Fields are checked against the schema the official `kubernetes` client ships
  (each model's `attribute_map` and `openapi_types`, nested models walked): metadata as `V1ObjectMeta`,
  a batch/v1 Job's spec as `V1JobSpec`, a JobSet's Job templates as `V1JobTemplateSpec`, and the pod
  templates embedded in CRD kinds (PyTorchJob, Volcano Job) as `V1PodTemplateSpec`.

A warning never changes the exit code: the job is placed as written.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from scheduler.gangs.profile import SCHEDULER_NAMES
from scheduler.handoff.manifests import job_pods
from topology.strict import did_you_mean

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT = re.compile(r"^[Dd]ict[\[(]\s*str\s*,\s*(.+)[\])]$")
MAX_FIELD_WARNINGS = 20
"""Unknown fields reported at most (a manifest of another API version could otherwise flood stderr)."""


def _model(type_name: str) -> Any:
    """The `kubernetes.client` model class called `type_name`, None for scalars (`str`, `int`, `object`...)."""
    import kubernetes.client

    model = getattr(kubernetes.client, type_name, None)
    return model if isinstance(getattr(model, "attribute_map", None), dict) else None


def unknown_fields(value: Any, type_name: str, where: str) -> list[tuple[str, str]]:
    """(path, `; did you mean ...` hint or "") for every key of `value` (and of its nested objects) that the
    client's model `type_name` does not have."""
    listed, mapped = _LIST.match(type_name), _DICT.match(type_name)
    if listed and isinstance(value, list):
        return [w for i, item in enumerate(value) for w in unknown_fields(item, listed.group(1), f"{where}[{i}]")]
    if mapped and isinstance(value, Mapping):
        return [w for key, item in value.items() for w in unknown_fields(item, mapped.group(1), f"{where}[{key}]")]
    model = _model(type_name)
    if model is None or not isinstance(value, Mapping):
        return []
    attribute_by_key = {key: attribute for attribute, key in model.attribute_map.items()}
    found = []
    for key, item in value.items():
        path = f"{where}.{key}" if where else str(key)
        attribute = attribute_by_key.get(key)
        if attribute is None:
            found.append((path, did_you_mean(str(key), attribute_by_key)))
        else:
            found.extend(unknown_fields(item, model.openapi_types[attribute], path))
    return found


def scheduler_name_warnings(job: Any) -> list[str]:
    """A warning per pod template whose pods would not be scheduled by meshfit's profile (or its extender host)."""
    accepted = sorted(SCHEDULER_NAMES | ({job.extender_of} if job.extender_of else set()))
    warnings = []
    for where, template in job.pod_templates:
        spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
        own = spec.get("schedulerName")
        name = own or job.default_scheduler
        field = f"{where}.spec.schedulerName" if own or not job.default_scheduler else "spec.schedulerName"
        if not name:
            warnings.append(f"{field} is not set: its pods go to kube-scheduler's default profile and never reach "
                            f"meshfit (set schedulerName: {accepted[0]})")
        elif name not in accepted:
            warnings.append(f"{field} is {name!r}, not meshfit's profile ({', '.join(accepted)}): its pods never "
                            "reach meshfit")
    return warnings


def job_warnings(manifest: Mapping[str, Any]) -> list[str]:
    """Every warning for a job manifest `load_job` accepted: unknown fields first, then scheduler names."""
    job = job_pods(manifest)
    parts = [("metadata", manifest.get("metadata"), "V1ObjectMeta"), *job.schema_parts]
    unknown = [found for where, part, model in parts for found in unknown_fields(part, model, where)]
    shown = [f"unknown field {path} (not in the Kubernetes schema: kubectl rejects it or the API server drops "
             f"it){hint}" for path, hint in unknown[:MAX_FIELD_WARNINGS]]
    if len(unknown) > MAX_FIELD_WARNINGS:
        shown.append(f"... and {len(unknown) - MAX_FIELD_WARNINGS} more unknown field(s)")
    return shown + scheduler_name_warnings(job)
