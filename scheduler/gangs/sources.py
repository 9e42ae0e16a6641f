"""The gang-source extension point: `GangMembership`, the `GangSource` protocol, `Lookup`, and small readers.

Gang sources (Volcano, coscheduling, Kueue, JobSet, Kubeflow, Indexed Job, the `meshfit.io/gang`
label) live in `plugins/gangs/` and are found through the `meshfit.gang_sources` entry points (see
`scheduler.gangs.membership`); what they return and the helpers the core shares with them are defined
here, so the core never imports a plugin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from scheduler.gangs.elastic import ElasticRange
from scheduler.handoff.assignment import ANNOTATION_GANG
from scheduler.placement.jobs import MAX_GANG_PODS, MAX_GPUS_PER_POD, JobSpecError, ModelShape, Parallelism, TopologyConstraint
from topology.k8s import pod_gpu_request
from topology.model import TopologyError

Lookup = Callable[[str, str, str], "dict | None"]
"""`lookup(kind, namespace, name)` -> the cached object (plain k8s JSON dict) or None.

Sources ask with the group-qualified kind (`"scheduling.volcano.sh/PodGroup"`, see `qualified_kind`),
so same-named objects of two API groups (Volcano vs coscheduling PodGroups, batch vs Volcano Jobs)
never stand in for each other; a plain kind means "that kind in any group"."""

LABEL_GANG = ANNOTATION_GANG
"""`meshfit.io/gang`: as a label it makes a pod a gang member; as an annotation a bind records it."""


@dataclass(frozen=True)
class GangMembership:
    """A pod's place in its gang: which gang, its index (rank block), the gang size and job settings."""

    gang_key: str
    index: int
    size: int
    source: str
    parallelism: Parallelism | None = None
    rank_order: str | None = None
    model: ModelShape | None = None
    constraint: TopologyConstraint = field(default_factory=TopologyConstraint)
    gpus_per_pod: int = 0
    elastic: ElasticRange | None = None
    """Elastic gangs: the data-parallel range it may run at (`scheduler.gangs.elastic`); None = fixed size."""
    placement_key: str | None = None
    """A node label kube-scheduler's own group cycle places this gang by (a 1.36 PodGroup's topology key): each
    `/filter` offers the nodes of one domain of it, so a reserved node missing from an offer may just be in
    another candidate placement (`scheduler.service.verbs.scheduling`)."""
    own_index: bool = True
    """False: the pod carries no index of its own (a PodGroup member); `index` is meshfit's stable choice, made by
    `scheduler.gangs.stable_index` when the pod enters the cluster state, and written to the pod with its ranks."""
    sub_group: str | None = None
    """The sub-group the pod belongs to inside its gang (a 1.37 PodGroup under a CompositePodGroup): the members of
    one sub-group take one block of `constraint.slice_size` consecutive indexes, i.e. one slice
    (`scheduler.gangs.stable_index`)."""


class NotAGangMember(Exception):
    """Raised by a source that owns the pod but knows it is outside the gang (e.g. a TrainJob initializer)."""


class GangSource(Protocol):
    """One way of recognising gang members (Volcano, coscheduling, Kueue, JobSet, Kubeflow, Job...).

    `priority` orders the sources (lower is asked first; the first match wins).  A source may also
    define `refine(member, pod, lookup) -> GangMembership`, applied to whichever source's answer won
    (the Kueue source adds a TAS assignment that way).
    """

    name: str
    priority: int

    def identify(self, pod: dict, lookup: Lookup) -> GangMembership | None:
        """The pod's membership, None when this source does not own the pod; JobSpecError if inconsistent."""
        ...


GangSourceFactory = Callable[[], GangSource]
"""Entry point target of the `meshfit.gang_sources` group: a new source instance."""


# ----- small readers over plain k8s dicts ----------------------------------------------------------
def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """`obj.metadata` as a mapping (empty when missing or malformed)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """`metadata.labels` (empty when missing)."""
    value = metadata(obj).get("labels")
    return value if isinstance(value, Mapping) else {}


def annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """`metadata.annotations` (empty when missing)."""
    value = metadata(obj).get("annotations")
    return value if isinstance(value, Mapping) else {}


def namespace_of(obj: Mapping[str, Any] | None) -> str:
    """`metadata.namespace`, "default" when unset."""
    return str(metadata(obj).get("namespace") or "default")


def pod_label(pod: dict) -> str:
    """`pod ns/name` for error messages."""
    return f"pod {namespace_of(pod)}/{metadata(pod).get('name') or '?'}"


def parse_count(raw: Any, what: str, minimum: int = 0, maximum: int = MAX_GANG_PODS) -> int:
    """An integer in [`minimum`, `maximum`] from a label/annotation/spec value; JobSpecError naming `what` otherwise.

    The default maximum is `scheduler.placement.result.jobs.MAX_GANG_PODS`: every count read from a pod or request is
    bounded before anything is sized by it.
    """
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise JobSpecError(f"{what} must be an integer, got {str(raw)[:40]!r}")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise JobSpecError(f"{what} must be an integer, got {str(raw)[:40]!r}") from None
    if value < minimum:
        raise JobSpecError(f"{what} must be >= {minimum}, got {raw!r}")
    if value > maximum:
        raise JobSpecError(f"{what} must be at most {maximum}, got {raw!r}")
    return value


def pod_gpus(pod: dict) -> int:
    """GPUs the pod holds (kube's max(app + sidecars, each init step) rule); JobSpecError if malformed or
    above `scheduler.placement.jobs.MAX_GPUS_PER_POD`."""
    try:
        gpus = pod_gpu_request(pod)
    except TopologyError as exc:
        raise JobSpecError(str(exc)) from None
    if gpus > MAX_GPUS_PER_POD:
        raise JobSpecError(f"{pod_label(pod)} requests {gpus} GPUs; at most {MAX_GPUS_PER_POD} per pod are accepted")
    return gpus


# ----- API groups and kinds ------------------------------------------------------------------------
def api_group(api_version: Any) -> str:
    """API group of an apiVersion string ("" for core / batch-less versions)."""
    text = str(api_version or "")
    return text.rpartition("/")[0] if "/" in text else ""


def qualified_kind(group: str, kind: str) -> str:
    """`group/Kind` (just `Kind` for the core group), the form lookups and the cluster state key objects by."""
    return f"{group}/{kind}" if group else kind


def split_kind(text: str) -> tuple[str | None, str]:
    """(API group, kind) of `group/Kind`; group None for a plain kind (any group)."""
    group, _, kind = text.rpartition("/")
    return (group if "/" in text else None), kind
