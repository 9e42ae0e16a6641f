"""Which gang a pod belongs to, and the `Gang` to place for it.

The gang-source plugins (`plugins.gangs.identify`) recognise Volcano, coscheduling, Kueue, JobSet,
Kubeflow, Indexed Job and plain `meshfit.io/gang` pods; this module turns a membership into the
`Gang` the engine places.  Everything here works on plain pod dicts.
"""

from __future__ import annotations

from typing import Any, Callable

from plugins.gangs import identify as identify_with_plugins
from plugins.gangs.base import GangMembership

from scheduler.jobs import (
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
from topology.k8s import pod_gpu_request
from topology.model import TopologyError

Lookup = Callable[[str, str, str], "dict | None"]
"""`lookup(kind, namespace, name)` -> the cached object or None (gang sources read owners with it)."""


def identify(pod: dict, lookup: Lookup | None = None) -> GangMembership | None:
    """The pod's gang membership via the gang-source plugins; None = not in a gang."""
    try:
        return identify_with_plugins(pod, lookup or (lambda kind, ns, name: None))
    except (TopologyError, KeyError, TypeError, AttributeError) as exc:
        raise JobSpecError(f"cannot identify the gang of the pod: {exc}") from exc


def pod_gpus(pod: dict) -> int:
    """GPUs the pod requests; JobSpecError for a malformed quantity or more than `MAX_GPUS_PER_POD`."""
    try:
        gpus = pod_gpu_request(pod)
    except TopologyError as exc:
        raise JobSpecError(str(exc)) from None
    if gpus > MAX_GPUS_PER_POD:
        raise JobSpecError(f"the pod requests {gpus} GPUs; at most {MAX_GPUS_PER_POD} per pod are accepted")
    return gpus


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
