"""How `ClusterState` reads a pod object into a `PodRecord` (a mixin): identity, GPUs, node, gang membership, the
node-local needs kube-scheduler's filters check, and a fingerprint that lets an unchanged pod skip all of that."""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from scheduler.cache.pod_record import PodRecord, controller_of, int_or_zero, since_of
from scheduler.gangs.membership import identify
from scheduler.gangs.profile import invalid_gang_key, is_meshfit_pod
from scheduler.gangs.rendezvous import given_from_annotations
from scheduler.gangs.spares import parse_gang_spares
from scheduler.placement.jobs import JobSpecError
from topology.k8s import pod_gpu_request, pod_holds_node
from topology.model import TopologyError


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class PodReading:
    """`_record` and `_fingerprint`; mixed into `ClusterState` (it provides `pods`, `config`, `get_object`,
    `needs_of` and `_objects_epoch`)."""

    pods: dict
    config: Any
    get_object: Any
    needs_of: Callable[[dict], Any] | None
    _objects_epoch: int

    def _fingerprint(self, pod: dict, uid: str) -> tuple:
        meta = pod.get("metadata") or {}
        version = meta.get("resourceVersion")
        if version:
            return (uid, self._objects_epoch, version)
        try:  # a digest, not the dicts themselves: keeping request bodies' 100 kB annotations alive costs memory
            digest = hash(msgspec.json.encode([meta.get("labels"), meta.get("annotations"),
                                               meta.get("ownerReferences"), (pod.get("spec") or {}).get("containers")]))
        except (TypeError, msgspec.EncodeError):
            digest = id(pod)
        return (uid, self._objects_epoch, digest)

    def _record(self, pod: dict) -> PodRecord:
        namespace, name = _meta(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or f"{namespace}/{name}")
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        fingerprint = self._fingerprint(pod, uid)
        known = self.pods.get(uid)
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
            member = identify(pod, self.get_object)
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
