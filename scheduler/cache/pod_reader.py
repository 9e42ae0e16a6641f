"""`PodReader`: how `ClusterState` reads a pod object into a `PodRecord` -- identity, GPUs, node, gang membership,
the node-local needs kube-scheduler's filters check, and a fingerprint that lets an unchanged pod skip all of that."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import msgspec

from scheduler.cache.pod_record import PodRecord, controller_of, int_or_zero, since_of
from scheduler.gangs.membership import identify
from scheduler.gangs.profile import invalid_gang_key, is_meshfit_pod
from scheduler.gangs.rendezvous import given_from_annotations
from scheduler.gangs.spares import parse_gang_spares
from scheduler.placement.jobs import JobSpecError
from topology.config import TopologyConfig
from topology.k8s import pod_gpu_request, pod_holds_node
from topology.model import TopologyError


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class ObjectLookup(Protocol):
    """The gang objects a pod's membership is read from (`scheduler.cache.gang_objects.GangObjects`)."""

    epoch: int

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        """The cached object, or None."""


class PodReader:
    """Reads pod dicts into records; a pod whose fingerprint is unchanged reuses its known record's reading."""

    def __init__(self, config: TopologyConfig, objects: ObjectLookup,
                 known: Callable[[str], PodRecord | None]) -> None:
        self.config = config
        """Which resources count as GPUs."""
        self.objects = objects
        """Gang objects: the lookup of gang sources, and the epoch every fingerprint carries."""
        self.known = known
        """Uid -> the record held for that pod (None: none)."""
        self.needs_of: Callable[[dict], Any] | None = None
        """Reads a pod's `needs` (kube-scheduler's node-local filter inputs; `scheduler.kube.node_fit.pod_needs` in
        Kubernetes mode); None: not read, and meshfit never binds members on its own."""

    def _fingerprint(self, pod: dict, uid: str) -> tuple:
        meta = pod.get("metadata") or {}
        version = meta.get("resourceVersion")
        if version:
            return (uid, self.objects.epoch, version)
        try:  # a digest, not the dicts themselves: keeping request bodies' 100 kB annotations alive costs memory
            digest = hash(msgspec.json.encode([meta.get("labels"), meta.get("annotations"),
                                               meta.get("ownerReferences"), (pod.get("spec") or {}).get("containers")]))
        except (TypeError, msgspec.EncodeError):
            digest = id(pod)
        return (uid, self.objects.epoch, digest)

    def read(self, pod: dict) -> PodRecord:
        """The record of `pod`, its membership read afresh only when its fingerprint changed."""
        namespace, name = _meta(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or f"{namespace}/{name}")
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        fingerprint = self._fingerprint(pod, uid)
        known = self.known(uid)
        node = pod_holds_node(pod)
        spec, status = pod.get("spec"), pod.get("status")
        priority = int_or_zero(spec.get("priority") if isinstance(spec, dict) else 0)
        nominated = str((status.get("nominatedNodeName") if isinstance(status, dict) else "") or "")
        terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        if known is not None and known.fingerprint == fingerprint and (known.namespace, known.name) == (namespace, name):
            return PodRecord(uid, namespace, name, known.gpus, node, phase, known.member,
                             known.member_error, fingerprint, known.given if node else None, priority, nominated,
                             known.cached_signature, scheduler_name=known.scheduler_name, spares=known.spares,
                             preemption_policy=known.preemption_policy, terminating=terminating, needs=known.needs,
                             owner=known.owner, invalid_gang=known.invalid_gang,
                             since=since_of(pod, bool(node)) if known.member is not None else "")
        try:
            gpus = pod_gpu_request(pod, self.config.gpu_resources)
        except TopologyError:
            gpus = 0
        member, error = None, None
        try:
            member = identify(pod, self.objects.get)
        except (JobSpecError, TopologyError, ValueError) as exc:
            error = str(exc)
        spares = 0
        try:
            spares = parse_gang_spares(pod.get("metadata")) if member is not None else 0
        except ValueError as exc:
            member, error = None, f"pod {namespace}/{name}: {exc}"
        given = given_from_annotations((pod.get("metadata") or {}).get("annotations"), name) \
            if node and member is not None else None
        record = PodRecord(uid, namespace, name, gpus, node, phase, member, error, fingerprint, given, priority, nominated,
                           spares=spares, terminating=terminating, owner=controller_of(pod, name, uid),
                           invalid_gang=invalid_gang_key(pod) if error and is_meshfit_pod(pod) else "",
                           since=since_of(pod, bool(node)) if member is not None else "")
        if self.needs_of is not None:
            try:
                record.needs = self.needs_of(pod)
            except Exception:  # noqa: BLE001 - unreadable spec: meshfit leaves the pod to kube-scheduler
                record.needs = None
        record.scheduler_name = str(spec.get("schedulerName") or "") if isinstance(spec, dict) else ""
        record.preemption_policy = str(spec.get("preemptionPolicy") or "") if isinstance(spec, dict) else ""
        return record
