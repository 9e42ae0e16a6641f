"""Gang source: JobSet pods (`jobset.sigs.k8s.io/*` labels + the Job completion index).

A JobSet's pods are laid out replicatedJobs in spec order x job index x completion index.  With the
JobSet cached, the index and size follow from its spec; without it, `job-global-index` (or
`job-index` for a single replicated job) times the pods per Job (from the cached child Job, else
the gang size divided by the Job count) plus the completion index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from plugins.gangs.base import (
    COMPLETION_INDEX, GangMembership, Lookup, explicit_index, label_or_annotation, lookup_kind, namespace_of,
    optional_count, owner_name, parse_count, pod_label, resolve_membership, size_without_owner,
)
from scheduler.placement.jobs import JobSpecError

NAME = "jobset"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOBSET_GROUP = "jobset.x-k8s.io"


@dataclass(frozen=True)
class ReplicatedJob:
    """One `spec.replicatedJobs[]` entry: name, Job replicas and pods per Job."""

    name: str
    replicas: int
    pods_per_job: int


def job_pod_count(job_spec: Mapping[str, Any], where: str) -> int:
    """Pods a batch/v1 Job spec runs at once (its parallelism, defaulting to completions, then 1)."""
    completions = job_spec.get("completions")
    parallelism = job_spec.get("parallelism", completions if completions is not None else 1)
    return parse_count(parallelism, f"{where}.parallelism", 1)


def replicated_jobs(jobset: Mapping[str, Any]) -> list[ReplicatedJob]:
    """The JobSet's replicated jobs in spec order."""
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), Mapping) else {}
    out = []
    for i, rjob in enumerate(r for r in spec.get("replicatedJobs") or () if isinstance(r, Mapping)):
        where = f"JobSet {namespace_of(jobset)}/{(jobset.get('metadata') or {}).get('name')} spec.replicatedJobs[{i}]"
        template = rjob.get("template") if isinstance(rjob.get("template"), Mapping) else {}
        job_spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
        out.append(ReplicatedJob(str(rjob.get("name") or f"job{i}"),
                                 parse_count(rjob.get("replicas", 1), f"{where}.replicas"),
                                 job_pod_count(job_spec, f"{where}.template.spec")))
    return out


def _index_from_spec(rjobs: list[ReplicatedJob], rjob_name: str | None, job_index: int, completion: int,
                     where: str) -> int:
    offset = 0
    for rjob in rjobs:
        if rjob.name == rjob_name or (rjob_name is None and len(rjobs) == 1):
            if job_index >= rjob.replicas or completion >= rjob.pods_per_job:
                raise JobSpecError(f"{where}: job index {job_index} / completion index {completion} outside "
                                   f"replicated job {rjob.name} ({rjob.replicas} Jobs x {rjob.pods_per_job} pods)")
            return offset + job_index * rjob.pods_per_job + completion
        offset += rjob.replicas * rjob.pods_per_job
    raise JobSpecError(f"{where}: replicated job {rjob_name!r} is not in the JobSet {[r.name for r in rjobs]}")


def _pods_per_job_without_jobset(pod: dict, lookup: Lookup, jobs_total: int, where: str) -> int:
    job = lookup_kind(lookup, "Job", "batch", namespace_of(pod), owner_name(pod, "Job"))
    if job is not None and isinstance(job.get("spec"), Mapping):
        return job_pod_count(job["spec"], f"Job {namespace_of(pod)}/{owner_name(pod, 'Job')} spec")
    size = size_without_owner(pod, lookup)
    if size % jobs_total:
        raise JobSpecError(f"{where}: gang size {size} is not a multiple of the JobSet's {jobs_total} Jobs")
    return size // jobs_total


def jobset_position(pod: dict, lookup: Lookup, jobset: Mapping[str, Any] | None,
                    only: str | None = None) -> tuple[int, int | None]:
    """(index, size or None) of a JobSet pod; `only` restricts the gang to one replicated job."""
    where = pod_label(pod)
    completion = optional_count(pod, COMPLETION_INDEX, where) or 0
    job_index = optional_count(pod, JOB_INDEX, where) or 0
    rjob_name = label_or_annotation(pod, REPLICATED_JOB_NAME)
    if jobset is not None:
        rjobs = [r for r in replicated_jobs(jobset) if only is None or r.name == only]
        index = _index_from_spec(rjobs, rjob_name, job_index, completion, where)
        return index, sum(r.replicas * r.pods_per_job for r in rjobs)
    global_index = None if only else optional_count(pod, JOB_GLOBAL_INDEX, where)
    total = None if only else optional_count(pod, GLOBAL_REPLICAS, where, 1)
    if total is None:
        total = optional_count(pod, REPLICATED_JOB_REPLICAS, where, 1) or 1
    pods_per_job = _pods_per_job_without_jobset(pod, lookup, total, where)
    index = (job_index if global_index is None else global_index) * pods_per_job + completion
    return index, None


class JobSetSource:
    """JobSet members; the whole JobSet is one gang."""

    name = NAME
    priority = 40
    """Order among gang sources (lower is asked first): job-level source."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for pods labelled with a JobSet name; None otherwise."""
        name = label_or_annotation(pod, JOBSET_NAME)
        if not name:
            return None
        jobset = lookup_kind(lookup, "JobSet", JOBSET_GROUP, namespace_of(pod), name)
        index, size = jobset_position(pod, lookup, jobset)
        explicit = explicit_index(pod, pod_label(pod))
        return resolve_membership(pod, lookup, source=NAME, gang_name=name,
                                  index=index if explicit is None else explicit, size=size, owner=jobset)


def factory() -> JobSetSource:
    """A new source instance."""
    return JobSetSource()
