"""Gang sources: Kubeflow PyTorchJob (training-operator labels) and Kubeflow Trainer TrainJob.

PyTorchJob pods carry `training.kubeflow.org/job-name`, `replica-type` (master / worker) and
`replica-index`; the Master is pod 0 and worker i is pod i+1 when the job has a Master (read from
the cached PyTorchJob, else from the `MASTER_ADDR` the operator injects, else assumed).  TrainJob
pods are the `node` replicated job of the JobSet the Trainer creates under the TrainJob's name;
the gang size is `spec.trainer.numNodes`; initializer pods are not part of the gang.
"""

from __future__ import annotations

from typing import Any, Mapping

from plugins.gangs.base import (
    GangMembership, Lookup, NotAGangMember, explicit_index, label_or_annotation, lookup_kind, metadata, namespace_of,
    optional_count, parse_count, pod_label, resolve_membership,
)
from plugins.gangs.jobset import JOBSET_NAME, REPLICATED_JOB_NAME, jobset_position, JOBSET_GROUP
from scheduler.placement.jobs import JobSpecError

PYTORCH_NAME = "pytorchjob"
TRAINJOB_NAME = "trainjob"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
OPERATOR_NAME = "training.kubeflow.org/operator-name"
PYTORCH_OPERATOR = "pytorchjob-controller"
TRAINJOB_LABEL = "trainer.kubeflow.org/trainjob-name"
ANCESTOR_STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
TRAINER_REPLICATED_JOB = "node"


def _replica_counts(job: Mapping[str, Any]) -> dict[str, int]:
    """Lower-cased replica type -> replicas of a PyTorchJob."""
    spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
    specs = spec.get("pytorchReplicaSpecs") if isinstance(spec.get("pytorchReplicaSpecs"), Mapping) else {}
    where = f"PyTorchJob {namespace_of(job)}/{metadata(job).get('name')}"
    return {str(role).lower(): parse_count((r or {}).get("replicas", 1), f"{where} {role}.replicas")
            for role, r in specs.items() if isinstance(r, Mapping) or r is None}


def _master_addr_says_master(pod: dict) -> bool | None:
    """True / False when the operator-injected MASTER_ADDR names a master / worker pod, else None."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    for container in spec.get("containers") or ():
        for env in (container or {}).get("env") or ():
            if isinstance(env, Mapping) and env.get("name") == "MASTER_ADDR" and env.get("value"):
                value = str(env["value"])
                if value.endswith("-master-0"):
                    return True
                if value.endswith("-worker-0"):
                    return False
    return None


class PyTorchJobSource:
    """PyTorchJob members: Master = pod 0, Worker i = pod i (+1 when a Master exists)."""

    name = PYTORCH_NAME
    priority = 20
    """Order among gang sources (lower is asked first): job-level sources (exact rank blocks) before group sources."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for training-operator PyTorchJob pods; None otherwise."""
        job_name = label_or_annotation(pod, JOB_NAME)
        operator = label_or_annotation(pod, OPERATOR_NAME)
        if not job_name or (operator is not None and operator != PYTORCH_OPERATOR):
            return None
        where = pod_label(pod)
        role = (label_or_annotation(pod, REPLICA_TYPE) or "").lower()
        if role not in ("master", "worker"):
            raise JobSpecError(f"{where}: PyTorchJob replica type {role or 'unset'!r} is not master or worker")
        replica = optional_count(pod, REPLICA_INDEX, where) or 0
        job = lookup_kind(lookup, "PyTorchJob", "kubeflow.org", namespace_of(pod), job_name)
        counts = _replica_counts(job) if job else {}
        if job:
            has_master = counts.get("master", 0) > 0
        else:
            says = _master_addr_says_master(pod)
            has_master = True if says is None else says
        index = replica if role == "master" else replica + (1 if has_master else 0)
        explicit = explicit_index(pod, where)
        return resolve_membership(pod, lookup, source=PYTORCH_NAME, gang_name=job_name,
                                  index=index if explicit is None else explicit,
                                  size=sum(counts.values()) if job else None, owner=job)


def _num_nodes(trainjob: Mapping[str, Any]) -> int | None:
    spec = trainjob.get("spec") if isinstance(trainjob.get("spec"), Mapping) else {}
    trainer = spec.get("trainer") if isinstance(spec.get("trainer"), Mapping) else {}
    raw = trainer.get("numNodes")
    where = f"TrainJob {namespace_of(trainjob)}/{metadata(trainjob).get('name')} spec.trainer.numNodes"
    return None if raw is None else parse_count(raw, where, 1)


class TrainJobSource:
    """Kubeflow Trainer TrainJob members (the trainer `node` pods of its JobSet)."""

    name = TRAINJOB_NAME
    priority = 30
    """Order among gang sources (lower is asked first): before `jobset`: a TrainJob runs as a JobSet."""

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """Membership for TrainJob trainer pods; None for other pods; NotAGangMember for initializer pods."""
        namespace = namespace_of(pod)
        name = label_or_annotation(pod, TRAINJOB_LABEL)
        trainjob = lookup_kind(lookup, "TrainJob", "trainer.kubeflow.org", namespace,
                               name or label_or_annotation(pod, JOBSET_NAME))
        if name is None and trainjob is None:
            return None
        name = name or str(metadata(trainjob).get("name"))
        step = label_or_annotation(pod, ANCESTOR_STEP)
        rjob = label_or_annotation(pod, REPLICATED_JOB_NAME)
        if (step is not None and step != TRAINER_STEP) or (step is None and rjob not in (None, TRAINER_REPLICATED_JOB)):
            raise NotAGangMember(f"{pod_label(pod)} is TrainJob {name}'s {step or rjob} step, not a trainer node")
        jobset = lookup_kind(lookup, "JobSet", JOBSET_GROUP, namespace, name)
        index, size = jobset_position(pod, lookup, jobset, only=rjob or TRAINER_REPLICATED_JOB)
        size = (_num_nodes(trainjob) if trainjob else None) or size
        explicit = explicit_index(pod, pod_label(pod))
        return resolve_membership(pod, lookup, source=TRAINJOB_NAME, gang_name=name,
                                  index=index if explicit is None else explicit, size=size, owner=trainjob)


def pytorch_factory() -> PyTorchJobSource:
    """A new PyTorchJob source."""
    return PyTorchJobSource()


def trainjob_factory() -> TrainJobSource:
    """A new TrainJob source."""
    return TrainJobSource()
