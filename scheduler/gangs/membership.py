"""Which gang a pod belongs to, and the `Gang` to place for it.

Gang sources (Volcano, coscheduling, Kueue, JobSet, Kubeflow, Indexed Job and plain `meshfit.io/gang`
pods) are plugins found through the `meshfit.gang_sources` entry points; `identify` asks them in
`priority` order, the first that recognises the pod wins.  Job-level sources (the ones that know the
pod's rank block exactly) come before generic group sources (PodGroups, Kueue pod groups), so a
PyTorchJob scheduled through Volcano or coscheduling still gets its Master-first indices; every
source's `refine` hook then sees the winner (Kueue adds its TAS assignment).  GPU-less pods are not
gang members unless they carry the explicit `meshfit.io/gang` label.  This module also turns a
membership into the `Gang` the engine places.  Everything here works on plain pod dicts.
"""

from __future__ import annotations

from typing import Any

from scheduler.gangs.sources import (
    LABEL_GANG, GangMembership, GangSource, Lookup, NotAGangMember, annotations, labels, pod_gpus, pod_label,
)
from scheduler.placement.annotation_keys import check_meshfit_keys
from scheduler.placement.jobs import (
    DEFAULT_RANK_ORDER,
    Gang,
    MAX_GANG_PODS,
    MAX_GPUS_PER_POD,
    JobSpecError,
    ModelShape,
    Parallelism,
    PodSlot,
    TopologyConstraint,
)
from scheduler.registry import Registry
from topology.model import TopologyError

GANG_SOURCE_GROUP = "meshfit.gang_sources"
"""Entry point group of gang sources."""

GANG_SOURCES: Registry = Registry(GANG_SOURCE_GROUP, "gang source")
"""Gang source name -> factory (loaded from the `meshfit.gang_sources` entry points on first lookup)."""

_instances: tuple[int, tuple[GangSource, ...]] | None = None


def gang_sources() -> tuple[GangSource, ...]:
    """One instance of every registered gang source, in the order they are asked (`priority`, then name)."""
    global _instances
    cached = _instances
    if cached is None or cached[0] != GANG_SOURCES.version:
        version = GANG_SOURCES.version
        sources = [factory() for factory in GANG_SOURCES.values()]
        sources.sort(key=lambda source: (getattr(source, "priority", 0), source.name))
        cached = _instances = (version, tuple(sources))
    return cached[1]


def _no_objects(kind: str, namespace: str, name: str) -> None:
    return None


def identify_with_sources(pod: dict, lookup: Lookup | None = None) -> GangMembership | None:
    """The pod's gang membership from the registered sources (None = not in a gang); JobSpecError if inconsistent.

    A pod not yet bound with an unknown or empty `meshfit.io/*` key is refused (JobSpecError with a did-you-mean
    hint), so a typo makes its gang wait with the reason rather than run with a default layout; a bound pod
    is past placing and is read as it is."""
    lookup = lookup or _no_objects
    spec = pod.get("spec")
    if not (isinstance(spec, dict) and spec.get("nodeName")):
        check_meshfit_keys(annotations(pod), labels(pod), pod_label(pod))
    if not labels(pod).get(LABEL_GANG) and pod_gpus(pod) == 0:
        return None
    sources = gang_sources()
    for source in sources:
        try:
            member = source.identify(pod, lookup)
        except NotAGangMember:
            return None
        if member is None:
            continue
        for refiner in sources:
            refine = getattr(refiner, "refine", None)
            if refine is not None:
                member = refine(member, pod, lookup)
        return member
    return None


def identify(pod: dict, lookup: Lookup | None = None) -> GangMembership | None:
    """The pod's gang membership via the gang sources; None = not in a gang."""
    try:
        return identify_with_sources(pod, lookup)
    except (TopologyError, KeyError, TypeError, AttributeError) as exc:
        raise JobSpecError(f"cannot identify the gang of the pod: {exc}") from exc


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
    if not 1 <= member.size <= MAX_GANG_PODS:  # every source ends here: never size a tuple by an unchecked count
        raise JobSpecError(f"gang {member.gang_key}: {member.size} pods; between 1 and {MAX_GANG_PODS} are accepted")
    if not 0 <= gpus <= MAX_GPUS_PER_POD:
        raise JobSpecError(f"gang {member.gang_key}: {gpus} GPUs per pod; at most {MAX_GPUS_PER_POD} are accepted")
    pods = tuple(PodSlot(i, names.get(i, f"{name}-{i}"), gpus) for i in range(member.size))
    return Gang(
        namespace=namespace, name=name, pods=pods,
        parallelism=member.parallelism or default_parallelism(member.size, gpus),
        rank_order=member.rank_order or DEFAULT_RANK_ORDER,
        model=member.model or ModelShape(),
        constraint=member.constraint or TopologyConstraint())
