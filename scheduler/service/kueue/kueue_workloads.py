"""Readers over Kueue objects as the API server returns them (plain dicts), for the admission check controller.

A Workload names its checks in `status.admissionChecks` (one entry per check of its ClusterQueue, each with a
`state`); Kueue evaluates them after it reserved quota (`QuotaReserved` condition, `status.admission`).  The
pods meshfit will see later are described by the podset's pod template; `prospective_pod` turns it into the pod
the Job controller creates for index 0, so the gang sources give the reservation the very key, size and
constraints the real pods will get.
"""

from __future__ import annotations

from typing import Any, Mapping

from scheduler.gangs.membership import identify
from scheduler.placement.jobs import JobSpecError
from topology.model import TopologyError

KUEUE_GROUP = "kueue.x-k8s.io"
CONTROLLER_NAME = "meshfit.io/topology"
"""`spec.controllerName` of the AdmissionChecks meshfit serves."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
NOT_YET = "the Workload's Job is not in meshfit's cache yet"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`metadata` (empty when absent)."""
    return _dict(obj.get("metadata"))


def api_version_of(obj: Mapping[str, Any]) -> str:
    """The version part of `apiVersion` (`v1beta2` of `kueue.x-k8s.io/v1beta2`)."""
    return str(obj.get("apiVersion") or "").rpartition("/")[2] or "v1beta2"


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """True when the status condition `kind` is True."""
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in _dict(obj.get("status")).get("conditions") or ())


def find_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition `kind`, None when absent."""
    for cond in _dict(obj.get("status")).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def is_meshfit_check(check: Mapping[str, Any]) -> bool:
    """An AdmissionCheck whose `spec.controllerName` is meshfit's."""
    return _dict(check.get("spec")).get("controllerName") == CONTROLLER_NAME


def check_states(workload: Mapping[str, Any], names: set[str] | frozenset[str]) -> dict[str, Mapping[str, Any]]:
    """Check name -> the Workload's state entry, for the checks in `names` it lists."""
    found = {}
    for entry in _dict(workload.get("status")).get("admissionChecks") or ():
        if isinstance(entry, Mapping) and entry.get("name") in names:
            found[str(entry["name"])] = entry
    return found


def quota_reserved(workload: Mapping[str, Any]) -> bool:
    """Kueue has reserved quota (the checks are evaluated only then)."""
    return condition_true(workload, "QuotaReserved") and bool(_dict(workload.get("status")).get("admission"))


def finished(workload: Mapping[str, Any]) -> bool:
    """The job ended (Kueue's `Finished` condition) or the Workload is being deleted."""
    return condition_true(workload, "Finished") or bool(meta(workload).get("deletionTimestamp"))


def admitted(workload: Mapping[str, Any]) -> bool:
    """Admitted: quota reserved and every check Ready."""
    return condition_true(workload, "Admitted")


def priority_of(workload: Mapping[str, Any]) -> int:
    """`spec.priority` (0 when absent)."""
    value = _dict(workload.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def owner_job(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the Workload's controlling owner, None when it has none."""
    refs = [r for r in meta(workload).get("ownerReferences") or () if isinstance(r, Mapping)]
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    group = str(chosen.get("apiVersion") or "").rpartition("/")[0]
    return (f"{group}/{chosen.get('kind')}" if group else str(chosen.get("kind"))), str(chosen.get("name") or "")


def owner_reference(workload: Mapping[str, Any]) -> dict:
    """The Workload's controlling ownerReference (for the prospective pod)."""
    refs = [r for r in meta(workload).get("ownerReferences") or () if isinstance(r, Mapping)]
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else {})
    return dict(chosen)


def podsets(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`spec.podSets`."""
    return [p for p in _dict(workload.get("spec")).get("podSets") or () if isinstance(p, Mapping)]


def prospective_pod(workload: Mapping[str, Any], podset: Mapping[str, Any], job: Mapping[str, Any]) -> dict:
    """Pod 0 of batch/v1 Job `job` as its controller will create it from the podset template, with the labels
    and annotations Kueue adds (workload, podset): what the gang sources will read from the real pods."""
    template = _dict(podset.get("template"))
    template_meta = _dict(template.get("metadata"))
    name = str(meta(job).get("name") or "")
    labels = {**_dict(template_meta.get("labels")), PODSET_LABEL: str(podset.get("name") or "main")}
    annotations = {**_dict(template_meta.get("annotations")), WORKLOAD_ANNOTATION: str(meta(workload).get("name"))}
    for key in JOB_NAME_LABELS:
        labels[key] = name
    if _dict(job.get("spec")).get("completionMode") == "Indexed":
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = "0"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-0", "namespace": str(meta(workload).get("namespace") or "default"),
                         "uid": f"kueue-check:{meta(workload).get('uid')}", "labels": labels,
                         "annotations": annotations, "ownerReferences": [owner_reference(workload)]},
            "spec": dict(_dict(template.get("spec"))), "status": {"phase": "Pending"}}


def membership_for(state: Any, workload: Mapping[str, Any]) -> tuple[Any, str]:
    """(the gang membership the Workload's pods will have, "") or (None, why there is none to reserve: `NOT_YET`
    while the owning Job is not cached yet); JobSpecError when the pod template is invalid for meshfit."""
    owner, sets = owner_job(workload), podsets(workload)
    if owner is None or owner[0] != "batch/Job" or len(sets) != 1:
        kind = owner[0] if owner is not None else "none"
        return None, (f"meshfit reserves ahead for batch/v1 Jobs only (owner {kind}, {len(sets)} podset(s)); "
                      "the pods are placed when they arrive")
    namespace = str(meta(workload).get("namespace") or "default")
    job = state.get_object("batch/Job", namespace, owner[1])
    if job is None:
        return None, NOT_YET
    try:
        member = identify(prospective_pod(workload, sets[0], job), state.get_object)
    except (TopologyError, ValueError) as exc:
        raise JobSpecError(str(exc)) from exc
    if member is None:
        return None, "its pods are not a gang (no GPUs requested)"
    return member, ""
