"""Per-kind readers: turn one training-job manifest into its pods in rank-block order.

Each reader returns a `JobPods`: the job's pod templates by pod index (name + template), the
annotation sources (job metadata first) and any topology constraint carried by a spec field
(Volcano `networkTopology`).  Field names follow the upstream APIs: Kubeflow PyTorchJob
(kubeflow.org/v1 `pytorchReplicaSpecs`), JobSet (jobset.x-k8s.io/v1alpha2 `replicatedJobs`),
Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1 `trainer.numNodes/resourcesPerNode`),
Volcano Job (batch.volcano.sh/v1alpha1 `tasks`, `networkTopology`) and batch/v1 Indexed Job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from scheduler.placement.capacity import VOLCANO_TIER_PREFIX
from scheduler.placement.jobs import JobSpecError

PYTORCH_ROLES = ("Master", "Worker")
"""PyTorchJob replica types in pod-index order (Master is rank block 0)."""


@dataclass
class JobPods:
    """What a kind reader extracts: pod (name, template) in index order, annotation dicts, constraints."""

    kind: str
    pods: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    annotation_sources: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    required_level: str | None = None
    preferred_level: str | None = None
    gpus_per_pod: int | None = None
    """Set by readers whose GPUs are not in a pod template (TrainJob resourcesPerNode)."""
    default_slice_size: int | None = None
    """Kueue slice size when `podset-slice-size` is absent (JobSet: pods per Job, if every Job has as many)."""
    pod_templates: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    """Each pod template once, with its path (`spec.tasks[0].template`): where `schedulerName` must be meshfit's."""
    schema_parts: list[tuple[str, Mapping[str, Any], str]] = field(default_factory=list)
    """(path, object, `kubernetes.client` model name) of the parts Kubernetes' own schema covers."""
    default_scheduler: str = ""
    """The schedulerName of pods whose template sets none ("": kube-scheduler's default profile)."""
    extender_of: str = ""
    """A scheduler that calls meshfit as its extender for this kind (Volcano): pods of its name reach meshfit."""

    def add_template(self, where: str, template: Mapping[str, Any], checked_whole: bool = True) -> None:
        """Note a pod template at `where`; schema-checked on its own unless a checked part holds it."""
        self.pod_templates.append((where, template))
        if checked_whole:
            self.schema_parts.append((where, template, "V1PodTemplateSpec"))


def as_mapping(value: Any, where: str) -> Mapping[str, Any]:
    """`value` if it is a mapping (None -> {}), else a one-line JobSpecError naming `where`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobSpecError(f"{where} must be an object, got {type(value).__name__}")
    return value


def count_field(obj: Mapping[str, Any], key: str, where: str, default: int | None) -> int:
    """A non-negative integer field (`replicas`, `parallelism`...) with a default; JobSpecError otherwise."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise JobSpecError(f"{where}.{key} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise JobSpecError(f"{where}.{key} must be a non-negative integer, got {value!r}")
    return value


def _annotations(meta: Any, where: str) -> Mapping[str, Any]:
    return as_mapping(as_mapping(meta, f"{where}.metadata").get("annotations"), f"{where}.metadata.annotations")


def _template(parent: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    template = parent.get("template")
    if template is None:
        raise JobSpecError(f"{where}.template is required")
    return as_mapping(template, f"{where}.template")


def read_pytorchjob(name: str, spec: Mapping[str, Any]) -> JobPods:
    """PyTorchJob: Master replica(s) first, then Worker 0..n-1."""
    specs = as_mapping(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    if not specs:
        raise JobSpecError("PyTorchJob spec.pytorchReplicaSpecs is empty")
    unknown = sorted(set(specs) - set(PYTORCH_ROLES))
    if unknown:
        raise JobSpecError(f"PyTorchJob replica type {unknown[0]!r} is not supported (Master, Worker)")
    out = JobPods("PyTorchJob")
    for role in PYTORCH_ROLES:
        if role not in specs:
            continue
        where = f"spec.pytorchReplicaSpecs.{role}"
        replica = as_mapping(specs[role], where)
        template = _template(replica, where)
        out.annotation_sources.append((f"{where}.template", _annotations(template.get("metadata"), f"{where}.template")))
        out.add_template(f"{where}.template", template)
        for i in range(count_field(replica, "replicas", where, 1)):
            out.pods.append((f"{name}-{role.lower()}-{i}", template))
    return out


def read_jobset(name: str, spec: Mapping[str, Any]) -> JobPods:
    """JobSet: replicatedJobs in order x replicas (job index) x completion index."""
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise JobSpecError("JobSet spec.replicatedJobs must be a non-empty list")
    out = JobPods("JobSet")
    sizes: set[int] = set()
    for r, rjob in enumerate(replicated):
        where = f"spec.replicatedJobs[{r}]"
        rjob = as_mapping(rjob, where)
        rname = rjob.get("name") or f"job{r}"
        job_template = _template(rjob, where)
        job_spec = as_mapping(job_template.get("spec"), f"{where}.template.spec")
        pod_template = _template(job_spec, f"{where}.template.spec")
        pods_per_job = _indexed_pod_count(job_spec, f"{where}.template.spec")
        sizes.add(pods_per_job)
        out.annotation_sources.append((f"{where}.template", _annotations(job_template.get("metadata"), f"{where}.template")))
        out.annotation_sources.append((f"{where}.template.spec.template",
                                       _annotations(pod_template.get("metadata"), f"{where}.template.spec.template")))
        out.add_template(f"{where}.template.spec.template", pod_template, checked_whole=False)
        out.schema_parts.append((f"{where}.template", job_template, "V1JobTemplateSpec"))
        for job_index in range(count_field(rjob, "replicas", where, 1)):
            for completion in range(pods_per_job):
                out.pods.append((f"{name}-{rname}-{job_index}-{completion}", pod_template))
    out.default_slice_size = sizes.pop() if len(sizes) == 1 and 0 not in sizes else None
    return out


def _indexed_pod_count(job_spec: Mapping[str, Any], where: str) -> int:
    """Pods running at once for a batch/v1 Job spec; a gang needs parallelism == completions."""
    parallelism = count_field(job_spec, "parallelism", where, 1)
    completions = count_field(job_spec, "completions", where, parallelism)
    if parallelism != completions:
        raise JobSpecError(f"{where}: parallelism ({parallelism}) must equal completions ({completions}) "
                           "for a gang (all pods run at once)")
    return completions


def read_trainjob(name: str, spec: Mapping[str, Any]) -> JobPods:
    """TrainJob: `trainer.numNodes` pods with `trainer.resourcesPerNode` each."""
    trainer = as_mapping(spec.get("trainer"), "spec.trainer")
    nodes = count_field(trainer, "numNodes", "spec.trainer", 1)
    resources = as_mapping(trainer.get("resourcesPerNode"), "spec.trainer.resourcesPerNode")
    out = JobPods("TrainJob")
    out.gpus_per_pod = gpus_from_resources(resources, "spec.trainer.resourcesPerNode")
    out.annotation_sources.append(("spec.annotations", as_mapping(spec.get("annotations"), "spec.annotations")))
    out.pods = [(f"{name}-node-0-{i}", {}) for i in range(nodes)]
    return out


def read_volcano_job(name: str, spec: Mapping[str, Any]) -> JobPods:
    """Volcano Job: tasks in order x replicas; `networkTopology` hard -> required, soft -> preferred tier."""
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise JobSpecError("Volcano Job spec.tasks must be a non-empty list")
    out = JobPods("Job.batch.volcano.sh", default_scheduler=str(spec.get("schedulerName") or "volcano"),
                  extender_of="volcano")
    for t, task in enumerate(tasks):
        where = f"spec.tasks[{t}]"
        task = as_mapping(task, where)
        template = _template(task, where)
        out.annotation_sources.append((f"{where}.template", _annotations(template.get("metadata"), f"{where}.template")))
        out.add_template(f"{where}.template", template)
        tname = task.get("name") or f"task{t}"
        for i in range(count_field(task, "replicas", where, 1)):
            out.pods.append((f"{name}-{tname}-{i}", template))
    topology = as_mapping(spec.get("networkTopology"), "spec.networkTopology")
    if topology:
        _read_network_topology(topology, out)
    return out


def _read_network_topology(topology: Mapping[str, Any], out: JobPods) -> None:
    mode = topology.get("mode", "hard")
    if mode not in ("hard", "soft"):
        raise JobSpecError(f"spec.networkTopology.mode must be hard or soft, got {mode!r}")
    tier = topology.get("highestTierAllowed", 1)
    if isinstance(tier, bool) or not isinstance(tier, int) or tier < 1:
        raise JobSpecError(f"spec.networkTopology.highestTierAllowed must be an integer >= 1, got {tier!r}")
    level = f"{VOLCANO_TIER_PREFIX}{tier}"
    if mode == "hard":
        out.required_level = level
    else:
        out.preferred_level = level


def read_indexed_job(name: str, spec: Mapping[str, Any]) -> JobPods:
    """batch/v1 Job with completionMode Indexed: completion index 0..n-1."""
    if spec.get("completionMode") != "Indexed":
        raise JobSpecError("batch/v1 Job must set spec.completionMode: Indexed (pod index = rank block)")
    template = _template(spec, "spec")
    out = JobPods("Job")
    out.annotation_sources.append(("spec.template", _annotations(template.get("metadata"), "spec.template")))
    out.add_template("spec.template", template, checked_whole=False)
    out.schema_parts.append(("spec", spec, "V1JobSpec"))
    out.pods = [(f"{name}-{i}", template) for i in range(_indexed_pod_count(spec, "spec"))]
    return out


GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
"""Extended resources counted as GPUs (first present wins)."""


def gpus_from_resources(resources: Mapping[str, Any], where: str) -> int:
    """GPUs in a `resources` block: limits, else requests; JobSpecError on a malformed count."""
    for section in ("limits", "requests"):
        block = as_mapping(resources.get(section), f"{where}.{section}")
        for key in GPU_RESOURCES:
            if key in block:
                value = block[key]
                text = str(value).strip()
                if not text.isdigit():
                    raise JobSpecError(f"{where}.{section}[{key}] must be a whole number, got {value!r}")
                return int(text)
    return 0


def gpus_from_template(template: Mapping[str, Any], where: str) -> int:
    """Sum of GPU limits (or requests) over the pod template's containers."""
    pod_spec = as_mapping(template.get("spec"), f"{where}.spec")
    containers = pod_spec.get("containers") or []
    if not isinstance(containers, list):
        raise JobSpecError(f"{where}.spec.containers must be a list")
    return sum(gpus_from_resources(as_mapping(as_mapping(c, f"{where}.spec.containers[{i}]").get("resources"),
                                              f"{where}.spec.containers[{i}].resources"),
                                   f"{where}.spec.containers[{i}].resources")
               for i, c in enumerate(containers))


KindReader = Callable[[str, Mapping[str, Any]], JobPods]

READERS: dict[tuple[str, str], KindReader] = {
    ("kubeflow.org", "PyTorchJob"): read_pytorchjob,
    ("jobset.x-k8s.io", "JobSet"): read_jobset,
    ("trainer.kubeflow.org", "TrainJob"): read_trainjob,
    ("batch.volcano.sh", "Job"): read_volcano_job,
    ("batch", "Job"): read_indexed_job,
}
"""(API group, kind) -> reader."""
