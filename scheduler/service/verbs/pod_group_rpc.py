"""`PlacePodGroup`: kube-scheduler's group cycle (1.36 PodGroup, KEP-5732) asks meshfit for a whole group's placement.

The meshfit kube-scheduler plugin (`kubeplugin/`) sends the group's unscheduled members (Pod JSON, as kube-scheduler
holds them) and its candidate nodes once per group cycle.  Each member goes through the same decision as the
extender's `/filter` (`GangScheduler.filter`): the first member places and reserves the whole gang in the ledger (queue,
preemption, replacement and rendezvous keep holding), every member gets its reserved node.  The answer carries each
member's node, ranks and the `meshfit.io/*` annotations its Binding carries; kube-scheduler binds the members itself
(pods with `spec.schedulingGroup` are never bound by meshfit: `scheduler.kube.node_fit`), and the watch marks the slots
bound.  meshfit does not requeue these members (`GangAdmission.group_cycle`): kube-scheduler's own queue retries a
PodGroup whose cycle failed.
"""

from __future__ import annotations

import json

from scheduler.service.binding.binder import RendezvousMissing, bind_assignment, master_address
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from scheduler.service.verbs.scheduling import GangScheduler

PLACED, UNSCHEDULABLE = "placed", "unschedulable"


class PodGroupError(ValueError):
    """The request cannot be answered (bad pod JSON, a pod outside any gang): INVALID_ARGUMENT."""


def _pods(request: pb.PodGroupRequest) -> list[dict]:
    pods = []
    for i, raw in enumerate(request.pods):
        try:
            pod = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PodGroupError(f"pods[{i}] is not JSON: {exc}") from exc
        if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
            raise PodGroupError(f"pods[{i}] is not a Pod object (no metadata)")
        pods.append(pod)
    if not pods:
        raise PodGroupError("pods is empty: send the group's unscheduled members")
    return pods


def _waiting(gang: str, reason: str) -> pb.PodGroupPlacement:
    return pb.PodGroupPlacement(status=UNSCHEDULABLE, gang=gang, reason=" ".join(reason.split()))


def place_pod_group(scheduler: GangScheduler, request: pb.PodGroupRequest) -> pb.PodGroupPlacement:
    """Place (and reserve) the group's gang; every member's node, ranks and Binding annotations, or why it waits."""
    pods, nodes = _pods(request), list(request.nodes)
    asked = scheduler.lifecycle.admission.group_cycle
    with scheduler.state.lock:  # kube-scheduler's queue retries these members: meshfit does not requeue them
        for pod in pods:
            asked[str(pod["metadata"].get("uid") or "")] = scheduler.lifecycle.clock()
    chosen: list[tuple[dict, str]] = []
    gang = f"{request.namespace}/{request.pod_group}"
    for pod in pods:
        decision = scheduler.filter(pod, nodes)
        if decision.error:
            return _waiting(gang, decision.error)
        if not decision.nodes:
            reasons = sorted(set(decision.failed.values()))
            return _waiting(gang, reasons[0] if reasons else "no candidate node")
        chosen.append((pod, decision.nodes[0]))
    return _answer(scheduler, chosen, gang)


def _answer(scheduler: GangScheduler, chosen: list[tuple[dict, str]], gang: str) -> pb.PodGroupPlacement:
    state = scheduler.state
    answer = pb.PodGroupPlacement(status=PLACED, gang=gang)
    with state.lock:
        for pod, node in chosen:
            meta = pod["metadata"]
            record = state.pod(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            if record is None or record.member is None:
                raise PodGroupError(f"pod {meta.get('name')!r} is not a member of any gang meshfit knows")
            entry = state.ledger.get(record.member.gang_key)
            if entry is None:
                return _waiting(gang, f"gang {record.member.gang_key}: its reservation was released; retrying")
            answer.gang = entry.gang_key
            try:
                assignment = bind_assignment(entry, record.member.index)
            except RendezvousMissing as exc:
                return _waiting(entry.gang_key, str(exc))
            answer.members.add(name=record.name, uid=record.uid, index=record.member.index, node=node,
                               ranks=list(assignment.ranks), annotations=assignment.to_annotations())
            answer.rendezvous = master_address(entry)
            if entry.placement is not None and entry.placement.cost is not None:
                answer.step_comm_seconds = entry.placement.cost.step_comm_seconds
    return answer
