"""Read a training-job manifest (PyTorchJob, JobSet, TrainJob, Volcano Job, Indexed Job) into a `Gang`.

Annotations (`meshfit.io/*`, Kueue `podset-*-topology`, `podset-slice-*`) may sit on the job's metadata or on any
pod template; the same key with two different values is an error.  When `meshfit.io/parallelism`
leaves out `dp`, dp is inferred as world size / (tp*cp*ep*pp); without the annotation the job is
pure data parallel.  Every problem is a one-line `JobSpecError` naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from scheduler.placement.jobs import (
    ANNOTATION_MODEL, ANNOTATION_PARALLELISM, ANNOTATION_PREFERRED_LEVEL, ANNOTATION_RANK_ORDER,
    ANNOTATION_REQUIRED_LEVEL, DEFAULT_RANK_ORDER, KUEUE_PREFERRED_TOPOLOGY, KUEUE_REQUIRED_TOPOLOGY,
    ANNOTATION_MAX_COMM_RATIO, KUEUE_SLICE_REQUIRED_TOPOLOGY, KUEUE_SLICE_SIZE, Gang, JobSpecError, ModelShape, Parallelism, PodSlot,
    TopologyConstraint, parse_key_values, parse_max_comm_ratio, parse_slice_annotations, pick_topology_level,
)
from scheduler.gangs.elastic import ANNOTATION_ELASTIC
from scheduler.placement.annotation_keys import check_meshfit_keys
from scheduler.handoff.manifest_kinds import READERS, JobPods, as_mapping, gpus_from_template
from topology.textfile import read_text

KNOWN_KEYS = (ANNOTATION_PARALLELISM, ANNOTATION_RANK_ORDER, ANNOTATION_MODEL, ANNOTATION_REQUIRED_LEVEL,
              ANNOTATION_PREFERRED_LEVEL, KUEUE_REQUIRED_TOPOLOGY, KUEUE_PREFERRED_TOPOLOGY,
              KUEUE_SLICE_REQUIRED_TOPOLOGY, KUEUE_SLICE_SIZE, ANNOTATION_MAX_COMM_RATIO, ANNOTATION_ELASTIC)
"""Annotation keys meshfit reads from a job manifest."""


def load_job(path: str | Path) -> Gang:
    """Read a YAML/JSON file holding exactly one job manifest and return its validated gang."""
    return read_job(path)[1]


def read_job(path: str | Path) -> tuple[dict[str, Any], Gang]:
    """The one job manifest a file holds and its validated gang; every JobSpecError names the file."""
    manifest = read_manifest(path)
    try:
        return manifest, gang_from_manifest(manifest)
    except JobSpecError as exc:
        raise JobSpecError(in_file(path, str(exc))) from None


def in_file(path: str | Path, message: str) -> str:
    """`message` with the file's name in front (unless it already starts with it)."""
    return message if message.startswith(str(path)) else f"{path}: {message}"


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The one job manifest a YAML/JSON file holds (any text `topology.textfile` reads); JobSpecError otherwise."""
    text = read_text(path, "job file", JobSpecError)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise JobSpecError(f"{path}: not valid YAML/JSON{where}: {problem}") from None
    if len(docs) != 1:
        raise JobSpecError(f"{path}: expected exactly one job manifest, found {len(docs)} documents")
    if not isinstance(docs[0], dict):
        raise JobSpecError(f"{path}: expected a job manifest (a mapping), got a {type(docs[0]).__name__}")
    return docs[0]


def _identify(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, reader key) of a manifest; JobSpecError for unsupported kinds."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise JobSpecError("manifest needs string apiVersion and kind")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    if (group, kind) not in READERS:
        known = ", ".join(f"{k} ({g or 'core'})" for g, k in READERS)
        raise JobSpecError(f"unsupported job kind {kind} ({api_version}); supported: {known}")
    meta = as_mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise JobSpecError(f"{kind}: metadata.name is required")
    return str(meta.get("namespace") or "default"), name, group


def merged_annotations(sources: list[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """meshfit/Kueue annotations from every source; JobSpecError if two sources disagree or a `meshfit.io/*`
    key is unknown (did-you-mean hint) or empty."""
    merged: dict[str, tuple[str, str]] = {}
    for where, annotations in sources:
        check_meshfit_keys(annotations, None, where)
        for key in KNOWN_KEYS:
            if key not in annotations:
                continue
            value = str(annotations[key]).strip()
            if key in merged and merged[key][1] != value:
                raise JobSpecError(f"annotation {key} is {merged[key][1]!r} on {merged[key][0]} "
                                   f"but {value!r} on {where}")
            merged.setdefault(key, (where, value))
    return {key: value for key, (_, value) in merged.items()}


def parallelism_for(annotations: Mapping[str, str], world_size: int) -> Parallelism:
    """Parallelism from the annotation, inferring dp when left out (pure DP without annotation)."""
    text = annotations.get(ANNOTATION_PARALLELISM)
    if text is None:
        return Parallelism(dp=max(world_size, 1))
    par = Parallelism.parse(text)
    if "dp" in parse_key_values(text, ANNOTATION_PARALLELISM):
        return par
    inner = par.world_size
    if world_size % inner:
        raise JobSpecError(f"{ANNOTATION_PARALLELISM}: tp*cp*ep*pp = {inner} does not divide the job's "
                           f"{world_size} GPUs, so dp cannot be inferred")
    return Parallelism(par.tp, par.cp, par.ep, par.pp, world_size // inner)


def _constraint(where: str, annotations: Mapping[str, str], job: JobPods) -> TopologyConstraint:
    """Required / preferred level (meshfit, Kueue, Volcano sources; conflicts are errors) and Kueue slices."""
    required = pick_topology_level(where, "required", (ANNOTATION_REQUIRED_LEVEL, annotations.get(ANNOTATION_REQUIRED_LEVEL)),
                    (KUEUE_REQUIRED_TOPOLOGY, annotations.get(KUEUE_REQUIRED_TOPOLOGY)),
                    ("spec.networkTopology", job.required_level))
    preferred = pick_topology_level(where, "preferred", (ANNOTATION_PREFERRED_LEVEL, annotations.get(ANNOTATION_PREFERRED_LEVEL)),
                     (KUEUE_PREFERRED_TOPOLOGY, annotations.get(KUEUE_PREFERRED_TOPOLOGY)),
                     ("spec.networkTopology", job.preferred_level))
    slice_level, slice_size = parse_slice_annotations(
        where, annotations.get(KUEUE_SLICE_REQUIRED_TOPOLOGY), annotations.get(KUEUE_SLICE_SIZE),
        job.default_slice_size)
    return TopologyConstraint(required_level=required, preferred_level=None if required else preferred,
                              slice_required_level=slice_level, slice_size=slice_size,
                              max_comm_ratio=parse_max_comm_ratio(where, annotations.get(ANNOTATION_MAX_COMM_RATIO)))


def _pod_gpus(job: JobPods) -> list[int]:
    """GPUs of each pod; every pod must request at least one."""
    if job.gpus_per_pod is not None:
        counts = [job.gpus_per_pod] * len(job.pods)
    else:
        cache: dict[int, int] = {}
        counts = [cache.setdefault(id(t), gpus_from_template(t, f"pod template of {n}")) for n, t in job.pods]
    for (pod_name, _), gpus in zip(job.pods, counts):
        if gpus < 1:
            raise JobSpecError(f"pod {pod_name} requests no GPUs (set resources.limits[nvidia.com/gpu])")
    return counts


def check_tp_fits_pods(gang: Gang) -> None:
    """JobSpecError if a tensor-parallel group would straddle pods unevenly (tp vs GPUs per pod)."""
    tp, g = gang.parallelism.tp, gang.gpus_per_pod
    if (tp > g and tp % g) or (tp < g and g % tp):
        raise JobSpecError(f"job {gang.key}: tp={tp} and {g} GPUs per pod do not nest (one must divide "
                           "the other), so tensor-parallel groups would straddle pods unevenly")


def _check_keys(job_name: str, meta: Mapping[str, Any], job: JobPods,
                sources: list[tuple[str, Mapping[str, Any]]]) -> None:
    """JobSpecError for an unknown or empty `meshfit.io/*` annotation or label on the job or its pod templates."""
    for where, annotations in sources:
        check_meshfit_keys(annotations, None, f"{job_name} {where}")
    check_meshfit_keys(None, as_mapping(meta.get("labels"), "metadata.labels"), f"{job_name} metadata")
    seen: set[int] = set()
    for pod_name, template in job.pods:
        if id(template) not in seen and isinstance(template, Mapping):
            seen.add(id(template))
            template_meta = template.get("metadata")
            if isinstance(template_meta, Mapping) and isinstance(template_meta.get("labels"), Mapping):
                check_meshfit_keys(None, template_meta["labels"], f"{job_name} pod template of {pod_name}")


def job_pods(obj: Mapping[str, Any]) -> JobPods:
    """What the kind's reader finds in a manifest: pods, pod templates, annotation sources, schema parts."""
    return _read(obj)[3]


def _read(obj: Mapping[str, Any]) -> tuple[str, str, str, JobPods]:
    namespace, name, group = _identify(obj)
    kind = obj["kind"]
    return namespace, name, kind, READERS[(group, kind)](name, as_mapping(obj.get("spec"), f"{kind} spec"))


def gang_from_manifest(obj: Mapping[str, Any]) -> Gang:
    """Turn one manifest dict into a validated `Gang` (pods in rank-block order)."""
    if not isinstance(obj, Mapping):
        raise JobSpecError(f"job manifest must be an object, got {type(obj).__name__}")
    namespace, name, kind, job = _read(obj)
    if not job.pods:
        raise JobSpecError(f"{kind} {namespace}/{name} has no pods")
    meta = as_mapping(obj.get("metadata"), "metadata")
    sources = [("metadata", as_mapping(meta.get("annotations"), "metadata.annotations")), *job.annotation_sources]
    _check_keys(f"{kind} {namespace}/{name}", meta, job, sources)
    annotations = merged_annotations(sources)
    gpus = _pod_gpus(job)
    model_text = annotations.get(ANNOTATION_MODEL)
    gang = Gang(
        namespace=namespace, name=name,
        pods=tuple(PodSlot(i, pod_name, g) for i, ((pod_name, _), g) in enumerate(zip(job.pods, gpus))),
        parallelism=parallelism_for(annotations, sum(gpus)),
        rank_order=annotations.get(ANNOTATION_RANK_ORDER, DEFAULT_RANK_ORDER).strip().lower(),
        model=ModelShape.parse(model_text) if model_text else ModelShape(),
        constraint=_constraint(f"{kind} {namespace}/{name}", annotations, job),
    )
    gang.validate()
    check_tp_fits_pods(gang)
    return gang
