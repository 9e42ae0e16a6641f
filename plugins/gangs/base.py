"""What every gang source shares: `resolve_membership` and readers (the types live in `scheduler.gangs.sources`).

A source only answers "which gang, which index, how big (if the owning object says)"; the shared
`resolve_membership` fills in the rest the same way for every source: GPUs per pod (kube's
init-container max rule), parallelism / rank order / model / topology constraint from the pod's
own annotations (inherited from its template) with the owning job object filling keys the pod
lacks, and the gang size from the owner, else a PodGroup's `minMember`, else the world size in
the parallelism annotation divided by the pod's GPUs.  Every inconsistency is one `JobSpecError`
line naming the pod.
"""

from __future__ import annotations

from typing import Any, Mapping

from scheduler.placement.jobs import (
    ANNOTATION_MAX_COMM_RATIO, KUEUE_SLICE_REQUIRED_TOPOLOGY, KUEUE_SLICE_SIZE, parse_max_comm_ratio,
    parse_slice_annotations,
    pick_topology_level,
    ANNOTATION_MODEL, ANNOTATION_PARALLELISM, ANNOTATION_PREFERRED_LEVEL, ANNOTATION_RANK_ORDER,
    ANNOTATION_REQUIRED_LEVEL, KUEUE_PREFERRED_TOPOLOGY, KUEUE_REQUIRED_TOPOLOGY, JobSpecError,
    MAX_GANG_PODS, ModelShape, Parallelism, TopologyConstraint, parse_key_values,
)
from scheduler.gangs.sources import (  # the core's types and readers, re-exported for the sources
    LABEL_GANG, GangMembership, GangSource, Lookup, NotAGangMember, annotations, api_group, labels, metadata,
    namespace_of, parse_count, pod_gpus, pod_label, qualified_kind, split_kind,
)
from scheduler.gangs.elastic import ANNOTATION_ELASTIC, elastic_range, parse_elastic, restated_parallelism
from scheduler.handoff.assignment import ANNOTATION_POD_INDEX, ANNOTATION_RANKS
from scheduler.handoff.manifest_kinds import READERS
from scheduler.handoff.manifests import KNOWN_KEYS, merged_annotations

ANNOTATION_GANG_SIZE = "meshfit.io/gang-size"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


# ----- small readers over plain pod dicts ---------------------------------------------------------
def label_or_annotation(obj: Mapping[str, Any], key: str) -> str | None:
    """A value set as a label or, failing that, as an annotation (None when absent or empty)."""
    value = labels(obj).get(key)
    if value in (None, ""):
        value = annotations(obj).get(key)
    return None if value in (None, "") else str(value)


def optional_count(obj: Mapping[str, Any], key: str, where: str, minimum: int = 0,
                   maximum: int = MAX_GANG_PODS) -> int | None:
    """`parse_count` of a label/annotation `key` on `obj`, None when absent."""
    raw = label_or_annotation(obj, key)
    return None if raw is None else parse_count(raw, f"{where}: {key}", minimum, maximum)


def owner_name(pod: dict, kind: str, group: str | None = None) -> str | None:
    """Name of the pod's ownerReference of `kind` (and API group when given), None if absent."""
    for ref in metadata(pod).get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("kind") != kind:
            continue
        if group is not None and api_group(ref.get("apiVersion")) != group:
            continue
        return str(ref.get("name") or "") or None
    return None


def lookup_kind(lookup: Lookup, kind: str, group: str, namespace: str, name: str | None) -> dict | None:
    """The cached object of kind `kind` in API `group`; an object of another group with that kind is ignored."""
    if not name:
        return None
    obj = lookup(qualified_kind(group, kind), namespace, name)
    if not isinstance(obj, dict):
        return None
    if obj.get("apiVersion") and api_group(obj.get("apiVersion")) != group:
        return None
    return obj


# ----- job settings: pod annotations first, the owner object fills the gaps --------------------------
_OWNER_SETTINGS_CACHE: dict[tuple[str, ...], tuple[dict[str, str], str | None, str | None]] = {}
_OWNER_SETTINGS_CACHE_SIZE = 4096


def owner_settings(owner: Mapping[str, Any] | None) -> tuple[dict[str, str], str | None, str | None]:
    """Known annotations of a job object (metadata + templates) and any spec-level required/preferred level.

    Memoised per object version (uid + resourceVersion): every member of a gang asks for the same owner.
    """
    if not isinstance(owner, Mapping):
        return {}, None, None
    meta = metadata(owner)
    key = (str(owner.get("apiVersion")), str(owner.get("kind")), str(meta.get("uid") or ""),
           str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))
    if not meta.get("resourceVersion"):
        return _owner_settings(owner)
    cached = _OWNER_SETTINGS_CACHE.get(key)
    if cached is None:
        if len(_OWNER_SETTINGS_CACHE) >= _OWNER_SETTINGS_CACHE_SIZE:
            _OWNER_SETTINGS_CACHE.clear()
        cached = _OWNER_SETTINGS_CACHE[key] = _owner_settings(owner)
    return cached


def _owner_settings(owner: Mapping[str, Any]) -> tuple[dict[str, str], str | None, str | None]:
    kind, group = owner.get("kind"), api_group(owner.get("apiVersion"))
    sources: list[tuple[str, Mapping[str, Any]]] = [("metadata", annotations(owner))]
    required = preferred = None
    reader = READERS.get((group, kind))
    if reader is not None and isinstance(owner.get("spec"), Mapping):
        try:
            job = reader(str(metadata(owner).get("name") or ""), owner["spec"])
        except JobSpecError:
            job = None
        if job is not None:
            sources.extend(job.annotation_sources)
            required, preferred = job.required_level, job.preferred_level
    try:
        merged = merged_annotations(sources)
    except JobSpecError as exc:
        raise JobSpecError(f"{kind} {namespace_of(owner)}/{metadata(owner).get('name')}: {exc}") from None
    return merged, required, preferred


def job_settings(pod: dict, owner: Mapping[str, Any] | None) -> tuple[dict[str, str], str | None, str | None]:
    """meshfit/Kueue annotation values for the pod: its own first, the owner's for keys it lacks."""
    own = {key: str(annotations(pod)[key]).strip() for key in KNOWN_KEYS if annotations(pod).get(key) not in (None, "")}
    inherited, required, preferred = owner_settings(owner)
    settings = {**inherited, **own}
    if ANNOTATION_RANKS in annotations(pod) and settings.get(ANNOTATION_ELASTIC) and settings.get(ANNOTATION_PARALLELISM):
        high = parse_elastic(settings[ANNOTATION_ELASTIC], pod_label(pod))[1]  # bound at some dp: declare the max
        settings[ANNOTATION_PARALLELISM] = restated_parallelism(settings[ANNOTATION_PARALLELISM], high, 0, 0)
    return settings, required, preferred


def constraint_from(settings: Mapping[str, str], where: str, required: str | None = None,
                    preferred: str | None = None, spec_field: str = "spec.networkTopology") -> TopologyConstraint:
    """Required / preferred level from meshfit, Kueue and spec-level settings (Volcano's `spec_field`, a PodGroup's
    topology key); conflicts are errors."""
    req = pick_topology_level(where, "required", (ANNOTATION_REQUIRED_LEVEL, settings.get(ANNOTATION_REQUIRED_LEVEL)),
                      (KUEUE_REQUIRED_TOPOLOGY, settings.get(KUEUE_REQUIRED_TOPOLOGY)),
                      (spec_field, required))
    pref = pick_topology_level(where, "preferred", (ANNOTATION_PREFERRED_LEVEL, settings.get(ANNOTATION_PREFERRED_LEVEL)),
                       (KUEUE_PREFERRED_TOPOLOGY, settings.get(KUEUE_PREFERRED_TOPOLOGY)),
                       ("spec.networkTopology", preferred))
    slice_level, slice_size = parse_slice_annotations(where, settings.get(KUEUE_SLICE_REQUIRED_TOPOLOGY),
                                                      settings.get(KUEUE_SLICE_SIZE))
    return TopologyConstraint(required_level=req, preferred_level=None if req else pref,
                              slice_required_level=slice_level, slice_size=slice_size,
                              max_comm_ratio=parse_max_comm_ratio(where, settings.get(ANNOTATION_MAX_COMM_RATIO)))


def podgroup_size(pod: dict, lookup: Lookup) -> int | None:
    """`spec.minMember` of the Volcano or coscheduling PodGroup the pod names, None when unknown."""
    namespace = namespace_of(pod)
    for group_name, group in ((annotations(pod).get(VOLCANO_GROUP_ANNOTATION), "scheduling.volcano.sh"),
                              (labels(pod).get(COSCHEDULING_LABEL), "scheduling.x-k8s.io")):
        podgroup = lookup_kind(lookup, "PodGroup", group, namespace, str(group_name) if group_name else None)
        spec = podgroup.get("spec") if podgroup else None
        if isinstance(spec, Mapping) and spec.get("minMember") is not None:
            return parse_count(spec["minMember"], f"PodGroup {namespace}/{group_name} spec.minMember", 1)
    return None


def _size_from_parallelism(text: str | None, gpus: int, where: str) -> int:
    if not text or gpus < 1:
        raise JobSpecError(f"{where}: cannot tell the gang size: the owning object is not available; set "
                           f"{ANNOTATION_GANG_SIZE} or {ANNOTATION_PARALLELISM} (with dp) and a GPU request")
    if "dp" not in parse_key_values(text, ANNOTATION_PARALLELISM):
        raise JobSpecError(f"{where}: cannot tell the gang size: {ANNOTATION_PARALLELISM} {text!r} leaves out dp "
                           "and the owning object is not available")
    world = Parallelism.parse(text).world_size
    if world % gpus:
        raise JobSpecError(f"{where}: {ANNOTATION_PARALLELISM} world size {world} is not a multiple of the "
                           f"pod's {gpus} GPUs")
    return world // gpus


def _parallelism(text: str | None, size: int, gpus: int, where: str) -> Parallelism | None:
    if not text:
        return None
    par = Parallelism.parse(text)
    if "dp" not in parse_key_values(text, ANNOTATION_PARALLELISM) and gpus > 0:
        inner, world = par.world_size, size * gpus
        if world % inner:
            raise JobSpecError(f"{where}: tp*cp*ep*pp = {inner} does not divide the gang's {size} pods x "
                               f"{gpus} GPUs = {world}, so dp cannot be inferred")
        par = Parallelism(par.tp, par.cp, par.ep, par.pp, world // inner)
    if gpus > 0 and par.world_size != size * gpus:
        raise JobSpecError(f"{where}: tp*cp*ep*pp*dp = {par.world_size} ({par}) but the gang has {size} pods x "
                           f"{gpus} GPUs = {size * gpus}")
    return par


def size_without_owner(pod: dict, lookup: Lookup, owner: Mapping[str, Any] | None = None) -> int:
    """Gang size when the owner does not say: `meshfit.io/gang-size`, a PodGroup's minMember, or world / GPUs."""
    where = pod_label(pod)
    size = optional_count(pod, ANNOTATION_GANG_SIZE, where, 1) or podgroup_size(pod, lookup)
    if size is None:
        settings = job_settings(pod, owner)[0]
        size = _size_from_parallelism(settings.get(ANNOTATION_PARALLELISM), pod_gpus(pod), where)
    return size


def resolve_membership(pod: dict, lookup: Lookup, *, source: str, gang_name: str, index: int | None,
                       size: int | None = None, owner: Mapping[str, Any] | None = None,
                       required_level: str | None = None) -> GangMembership:
    """Complete a source's answer (gang, index, maybe size and required level) into a checked `GangMembership`.

    `index=None`: the pod has no index of its own; meshfit gives it a stable one (`GangMembership.own_index`).
    `required_level` is a level the gang object itself requires (a PodGroup's topology key, which kube-scheduler's
    group cycle places it by: `GangMembership.placement_key`)."""
    where = pod_label(pod)
    own_index = index is not None
    index = 0 if index is None else index
    gpus = pod_gpus(pod)
    settings, required, preferred = job_settings(pod, owner)
    if size is None:
        size = size_without_owner(pod, lookup, owner)
    if size < 1:
        raise JobSpecError(f"{where}: gang {gang_name} has size {size}")
    if size > MAX_GANG_PODS:
        raise JobSpecError(f"{where}: gang {gang_name} has {size} pods; at most {MAX_GANG_PODS} are accepted")
    if not 0 <= index < size:
        raise JobSpecError(f"{where}: pod index {index} is outside gang {namespace_of(pod)}/{gang_name} of {size} pods")
    model_text = settings.get(ANNOTATION_MODEL)
    order = settings.get(ANNOTATION_RANK_ORDER)
    text, policy = settings.get(ANNOTATION_PARALLELISM), elastic_policy(owner)
    if text and policy is not None and ANNOTATION_RANKS in annotations(pod):  # bound at some dp: declare the max
        text = restated_parallelism(text, None, size, gpus)
    parallelism = _parallelism(text, size, gpus, where)
    spec_field = "spec.networkTopology"
    if required_level is not None:
        spec_field, required = "spec.schedulingConstraints.topology", required_level
    constraint = constraint_from(settings, where, required, preferred, spec_field)
    elastic = elastic_range(settings.get(ANNOTATION_ELASTIC), policy,
                            parallelism or Parallelism(tp=max(gpus, 1), dp=size), size, gpus, order, where,
                            constraint.has_slices)
    return GangMembership(
        gang_key=f"{namespace_of(pod)}/{gang_name}", index=index, size=size, source=source,
        parallelism=parallelism, rank_order=order.strip().lower() if order else None,
        model=ModelShape.parse(model_text) if model_text else None,
        constraint=constraint, gpus_per_pod=gpus, elastic=elastic, own_index=own_index, placement_key=required_level)


def elastic_policy(owner: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """`spec.elasticPolicy` of a Kubeflow PyTorchJob owner (None for other owners or when unset)."""
    if not isinstance(owner, Mapping) or owner.get("kind") != "PyTorchJob" or \
            api_group(owner.get("apiVersion")) != "kubeflow.org":
        return None
    spec = owner.get("spec")
    policy = spec.get("elasticPolicy") if isinstance(spec, Mapping) else None
    return policy if isinstance(policy, Mapping) else None


def explicit_index(pod: dict, where: str) -> int | None:
    """`meshfit.io/pod-index` when the user set it (it overrides what a source would derive)."""
    return optional_count(pod, ANNOTATION_POD_INDEX, where)
