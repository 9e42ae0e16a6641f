"""Which gang a pod belongs to, and the `Gang` to place for it.

The gang-source plugins (`plugins.gangs.identify`) recognise Volcano, coscheduling, Kueue, JobSet,
Kubeflow and Indexed Job pods.  This module calls them lazily, and falls back to the plain
`meshfit.io/gang` label path on its own when the plugins are not installed, so the service runs
(and its tests pass) either way.  Everything here works on plain pod dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from scheduler.jobs import (
    ANNOTATION_MODEL,
    ANNOTATION_PARALLELISM,
    ANNOTATION_PREFERRED_LEVEL,
    ANNOTATION_RANK_ORDER,
    ANNOTATION_REQUIRED_LEVEL,
    DEFAULT_RANK_ORDER,
    Gang,
    JobSpecError,
    ModelShape,
    Parallelism,
    PodSlot,
    TopologyConstraint,
)
from topology.k8s import pod_gpu_request
from topology.model import TopologyError

LABEL_GANG = "meshfit.io/gang"
ANNOTATION_POD_INDEX = "meshfit.io/pod-index"
ANNOTATION_GANG_SIZE = "meshfit.io/gang-size"

Lookup = Callable[[str, str, str], "dict | None"]
"""`lookup(kind, namespace, name)` -> the cached object or None (gang sources read owners with it)."""


@dataclass(frozen=True)
class Membership:
    """A pod's place in its gang (same fields as `plugins.gangs.GangMembership`)."""

    gang_key: str
    index: int
    size: int
    source: str
    parallelism: Parallelism | None = None
    rank_order: str | None = None
    model: ModelShape | None = None
    constraint: TopologyConstraint = field(default_factory=TopologyConstraint)
    gpus_per_pod: int = 0


def _metadata(pod: dict) -> dict:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        raise JobSpecError("the pod has no metadata")
    return meta


def _int_annotation(annotations: dict, key: str, where: str) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise JobSpecError(f"{where}: annotation {key} must be an integer, got {raw!r}") from None
    if value < 0:
        raise JobSpecError(f"{where}: annotation {key} must be >= 0, got {raw!r}")
    return value


def identify_by_label(pod: dict, lookup: Lookup | None = None) -> Membership | None:
    """The plain `meshfit.io/gang` label path: index and size from meshfit annotations."""
    meta = _metadata(pod)
    name = (meta.get("labels") or {}).get(LABEL_GANG)
    if not name:
        return None
    annotations = meta.get("annotations") or {}
    where = f"pod {meta.get('namespace') or 'default'}/{meta.get('name')}"
    gpus = pod_gpus(pod)
    parallelism = Parallelism.parse(annotations[ANNOTATION_PARALLELISM]) \
        if annotations.get(ANNOTATION_PARALLELISM) else None
    index = _int_annotation(annotations, ANNOTATION_POD_INDEX, where)
    if index is None:
        raise JobSpecError(f"{where}: gang member without annotation {ANNOTATION_POD_INDEX}")
    size = _int_annotation(annotations, ANNOTATION_GANG_SIZE, where)
    if size is None:
        if parallelism is None or gpus < 1 or parallelism.world_size % gpus:
            raise JobSpecError(f"{where}: cannot tell the gang size: set {ANNOTATION_GANG_SIZE} "
                               f"or {ANNOTATION_PARALLELISM} with a GPU request")
        size = parallelism.world_size // gpus
    if size < 1 or index >= size:
        raise JobSpecError(f"{where}: pod index {index} is outside the gang of {size} pods")
    return Membership(
        gang_key=f"{meta.get('namespace') or 'default'}/{name}", index=index, size=size,
        source="meshfit-label", parallelism=parallelism,
        rank_order=annotations.get(ANNOTATION_RANK_ORDER),
        model=ModelShape.parse(annotations[ANNOTATION_MODEL]) if annotations.get(ANNOTATION_MODEL) else None,
        constraint=TopologyConstraint(annotations.get(ANNOTATION_REQUIRED_LEVEL),
                                      annotations.get(ANNOTATION_PREFERRED_LEVEL)),
        gpus_per_pod=gpus)


def _plugin_identify() -> Callable[[dict, Lookup], Any] | None:
    try:
        from plugins.gangs import identify as plugin_identify  # noqa: PLC0415 (written in parallel)
    except ImportError:
        return None
    return plugin_identify


def identify(pod: dict, lookup: Lookup | None = None) -> Any:
    """The pod's gang membership via the gang-source plugins (label fallback); None = not in a gang."""
    plugin_identify = _plugin_identify()
    if plugin_identify is None:
        return identify_by_label(pod, lookup)
    try:
        return plugin_identify(pod, lookup or (lambda kind, ns, name: None))
    except (TopologyError, KeyError, TypeError, AttributeError) as exc:
        raise JobSpecError(f"cannot identify the gang of the pod: {exc}") from exc


def pod_gpus(pod: dict) -> int:
    """GPUs the pod requests; JobSpecError for a malformed quantity."""
    try:
        return pod_gpu_request(pod)
    except TopologyError as exc:
        raise JobSpecError(str(exc)) from None


def membership_signature(member: Any) -> tuple:
    """What every pod of one gang must agree on: size, GPUs per pod, parallelism, rank order."""
    par = member.parallelism
    return (member.size, member.gpus_per_pod, str(par) if par is not None else None, member.rank_order)


def describe_signature(signature: tuple) -> str:
    """Human text for a `membership_signature`."""
    size, gpus, par, order = signature
    return f"{size} pods x {gpus} GPUs, parallelism {par or 'unset'}, rank order {order or 'default'}"


def default_parallelism(size: int, gpus_per_pod: int) -> Parallelism:
    """Parallelism assumed when a gang declares none: tensor-parallel inside a pod, data-parallel across."""
    return Parallelism(tp=max(gpus_per_pod, 1), dp=max(size, 1))


def gang_from_membership(member: Any, pod_names: dict[int, str] | None = None) -> Gang:
    """The `Gang` to place for a membership (pods not yet seen get placeholder names)."""
    namespace, _, name = member.gang_key.partition("/")
    names = pod_names or {}
    gpus = member.gpus_per_pod
    pods = tuple(PodSlot(i, names.get(i, f"{name}-{i}"), gpus) for i in range(member.size))
    return Gang(
        namespace=namespace, name=name, pods=pods,
        parallelism=member.parallelism or default_parallelism(member.size, gpus),
        rank_order=member.rank_order or DEFAULT_RANK_ORDER,
        model=member.model or ModelShape(),
        constraint=member.constraint or TopologyConstraint())
