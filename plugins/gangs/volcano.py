"""Gang source: Volcano PodGroups (`scheduling.k8s.io/group-name` annotation) and Volcano Jobs.

The gang is the PodGroup; its size is the Volcano Job's task replicas when the Job is cached, else
the PodGroup's `spec.minMember`, else the world size over the pod's GPUs.  The index is the pod's
`volcano.sh/task-index` offset by the replicas of the tasks listed before its `volcano.sh/task-spec`
task in the Job; without the Job a pod of a single-task job is assumed.
"""

from __future__ import annotations

from typing import Any, Mapping

from plugins.gangs.base import (
    VOLCANO_GROUP_ANNOTATION, GangMembership, Lookup, annotations, explicit_index, label_or_annotation,
    lookup_kind, namespace_of, optional_count, owner_name, parse_count, pod_label, resolve_membership,
)
from scheduler.placement.jobs import JobSpecError

NAME = "volcano"
VOLCANO_GROUP_ANNOTATION_ALT = "scheduling.volcano.sh/group-name"
TASK_INDEX = "volcano.sh/task-index"
TASK_SPEC = "volcano.sh/task-spec"
JOB_NAME = "volcano.sh/job-name"
JOB_GROUP = "batch.volcano.sh"
PODGROUP_GROUP = "scheduling.volcano.sh"


def _tasks(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(task name, replicas) of a Volcano Job in spec order."""
    spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
    tasks = spec.get("tasks") if isinstance(spec.get("tasks"), list) else []
    where = f"Volcano Job {namespace_of(job)}/{(job.get('metadata') or {}).get('name')}"
    out = []
    for i, task in enumerate(t for t in tasks if isinstance(t, Mapping)):
        replicas = parse_count(task.get("replicas", 1), f"{where} spec.tasks[{i}].replicas")
        out.append((str(task.get("name") or f"task{i}"), replicas))
    return out


def _task_offset(tasks: list[tuple[str, int]], task: str | None, where: str) -> int:
    if task is None:
        if len(tasks) > 1:
            raise JobSpecError(f"{where}: no {TASK_SPEC} but the Volcano Job has {len(tasks)} tasks")
        return 0
    offset = 0
    for name, replicas in tasks:
        if name == task:
            return offset
        offset += replicas
    raise JobSpecError(f"{where}: task {task!r} is not among the Volcano Job's tasks {[n for n, _ in tasks]}")


class VolcanoSource:
    """Volcano PodGroup members; index from the task index and the Job's task order."""

    name = NAME
    priority = 60
    """Order among gang sources (lower is asked first): group sources come after the job-level ones."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for pods naming a Volcano PodGroup; None otherwise."""
        pod_annotations = annotations(pod)
        group = pod_annotations.get(VOLCANO_GROUP_ANNOTATION) or pod_annotations.get(VOLCANO_GROUP_ANNOTATION_ALT)
        if not group:
            return None
        where, namespace = pod_label(pod), namespace_of(pod)
        job_name = label_or_annotation(pod, JOB_NAME) or owner_name(pod, "Job", JOB_GROUP)
        job = lookup_kind(lookup, "Job", JOB_GROUP, namespace, job_name)
        tasks = _tasks(job) if job else []
        index = explicit_index(pod, where)
        if index is None:
            task_index = optional_count(pod, TASK_INDEX, where)
            if task_index is None:
                raise JobSpecError(f"{where}: Volcano gang member without {TASK_INDEX} (or meshfit.io/pod-index)")
            index = _task_offset(tasks, label_or_annotation(pod, TASK_SPEC), where) + task_index if tasks else task_index
        size = sum(r for _, r in tasks) if tasks else None
        owner = job or lookup_kind(lookup, "PodGroup", PODGROUP_GROUP, namespace, str(group))
        return resolve_membership(pod, lookup, source=NAME, gang_name=str(group), index=index, size=size, owner=owner)


def factory() -> VolcanoSource:
    """A new source instance."""
    return VolcanoSource()
