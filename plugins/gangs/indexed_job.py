"""Gang source: batch/v1 Indexed Jobs (`batch.kubernetes.io/job-completion-index` + the Job name)."""

from __future__ import annotations

from typing import Mapping

from plugins.gangs.base import (
    COMPLETION_INDEX, GangMembership, Lookup, explicit_index, label_or_annotation, lookup_kind, namespace_of,
    optional_count, owner_name, pod_label, resolve_membership,
)
from plugins.gangs.jobset import job_pod_count

NAME = "indexed-job"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


class IndexedJobSource:
    """Pods of an Indexed Job; index = completion index, size = the Job's parallelism (= completions)."""

    name = NAME
    priority = 50
    """Order among gang sources (lower is asked first): the last job-level source."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for Indexed Job pods; None for pods without a completion index or Job."""
        where = pod_label(pod)
        completion = optional_count(pod, COMPLETION_INDEX, where)
        if completion is None:
            return None
        job_name = owner_name(pod, "Job", "batch")
        for key in JOB_NAME_LABELS:
            job_name = job_name or label_or_annotation(pod, key)
        if not job_name:
            return None
        job = lookup_kind(lookup, "Job", "batch", namespace_of(pod), job_name)
        spec = job.get("spec") if job is not None else None
        size = job_pod_count(spec, f"Job {namespace_of(pod)}/{job_name} spec") if isinstance(spec, Mapping) else None
        explicit = explicit_index(pod, where)
        return resolve_membership(pod, lookup, source=NAME, gang_name=job_name,
                                  index=completion if explicit is None else explicit, size=size, owner=job)


def factory() -> IndexedJobSource:
    """A new source instance."""
    return IndexedJobSource()
