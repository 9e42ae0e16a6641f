"""Volcano `extender` plugin verbs (volcano-sh/volcano pkg/scheduler/plugins/extender/argument.go).

Volcano marshals its scheduler-cache types without json tags on the inner structs, so TaskInfo,
JobInfo and NodeInfo keys are Go field names (`UID`, `Name`, `Namespace`, `Pod`, `Node`, ...);
the request and response envelopes carry json tags (`task`, `node`, `nodes`, `job`, `status`,
`code`, `nodeScore`, `errorMessage`, `evictor`, `evictees`, `victims`, `overused`).
`jobEnqueueable` vetoes a job the topology cannot place; `predicate` steers each task to its rank's
node (the first task's call reserves the whole gang); `preemptable`/`reclaimable` never hand over
part of a gang.
"""

from __future__ import annotations

import msgspec

from scheduler.placement.annotation_keys import check_meshfit_keys
from scheduler.placement.jobs import ANNOTATION_PARALLELISM, ANNOTATION_RANK_ORDER, MAX_GANG_PODS, JobSpecError, Parallelism
from scheduler.gangs.sources import GangMembership as Membership, parse_count
from scheduler.gangs.sources import pod_gpus
from scheduler.gangs.membership import gang_from_membership, identify
from scheduler.service.verbs.scheduling import GangScheduler
from scheduler.service.verbs.wire import PodGroupShape, pod_error, shape_error
from topology.k8s import parse_gpu_quantity
from topology.model import TopologyError

PERMIT, ABSTAIN, REJECT = 1, 0, -1
"""Volcano plugin votes (pkg/scheduler/plugins/util)."""
CODE_SUCCESS, CODE_ERROR, CODE_UNSCHEDULABLE = 0, 1, 2
"""api.Status codes used in predicate replies."""


class TaskInfo(msgspec.Struct):
    """api.TaskInfo: the fields meshfit reads."""

    UID: str = ""
    Job: str = ""
    Name: str = ""
    Namespace: str = ""
    NodeName: str = ""
    Pod: dict | None = None


class NodeInfo(msgspec.Struct):
    """api.NodeInfo: the node's name."""

    Name: str = ""


class JobInfo(msgspec.Struct):
    """api.JobInfo: identity, gang size and tasks, and the PodGroup (flattened metadata/spec)."""

    UID: str = ""
    Name: str = ""
    Namespace: str = ""
    MinAvailable: int = 0
    Tasks: dict[str, TaskInfo] | None = None
    PodGroup: dict | None = None


class PredicateRequest(msgspec.Struct):
    """`{"task", "node"}`."""

    task: TaskInfo | None = None
    node: NodeInfo | None = None


class PrioritizeRequest(msgspec.Struct):
    """`{"task", "nodes"}`."""

    task: TaskInfo | None = None
    nodes: list[NodeInfo] | None = None


class JobRequest(msgspec.Struct):
    """`{"job"}` for jobEnqueueable and jobReady."""

    job: JobInfo | None = None


class EvictRequest(msgspec.Struct):
    """`{"evictor", "evictees"}` for preemptable and reclaimable."""

    evictor: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    evictees: list[msgspec.Raw] | None = None


ENCODER = msgspec.json.Encoder()


def _decode(body: bytes, kind: type) -> object:
    return msgspec.json.decode(body or b"{}", type=kind)


def _reply(payload: object) -> tuple[int, bytes]:
    return 200, ENCODER.encode(payload)


class BadRequest(Exception):
    """A request body that decodes but is not what Volcano sends (answered 400 with the reason)."""


def _bad(reason: str) -> tuple[int, bytes]:
    return 400, ENCODER.encode({"error": " ".join(reason.split())})


def _check_pod(pod: object, what: str) -> None:
    """BadRequest unless `pod` (when given) is a well-typed Pod."""
    if pod is not None and (reason := pod_error(pod, what)):
        raise BadRequest(reason)


def _guard(handler):
    """Decode failures, too-deep JSON and ill-typed Pods / PodGroups become 400 with the reason."""

    def wrapped(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
        try:
            return handler(scheduler, body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return _bad(f"malformed request body: {exc}")
        except RecursionError:
            return _bad("malformed request body: JSON nested too deeply")
        except BadRequest as exc:
            return _bad(str(exc))

    wrapped.__doc__ = handler.__doc__
    return wrapped


def on_session_open(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """A scheduling session starts: release expired reservations (the snapshot itself is not needed)."""
    msgspec.json.decode(body or b"{}")
    scheduler.sweep()
    return _reply({})


def on_session_close(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """A scheduling session ends."""
    return _reply({})


def _gang_of_job(scheduler: GangScheduler, job: JobInfo):
    """The gang a Volcano job will be: from a task's pod, else from the PodGroup's minMember/minResources."""
    for key, task in (job.Tasks or {}).items():
        _check_pod(task.Pod, f"job.Tasks[{key}].Pod")
    group = job.PodGroup or {}
    if reason := shape_error(group, PodGroupShape, "job.PodGroup"):
        raise BadRequest(reason)
    for task in (job.Tasks or {}).values():
        if task.Pod:
            member = identify(task.Pod, scheduler.state.get_object)
            if member is not None:
                return gang_from_membership(member)
            gpus = pod_gpus(task.Pod)
            break
    else:
        gpus = None
    spec = group.get("spec") or {}
    annotations = (group.get("metadata") or {}).get("annotations") or {}
    check_meshfit_keys(annotations, None, f"job {job.Namespace or 'default'}/{job.Name} PodGroup")
    size = parse_count(spec.get("minMember") or job.MinAvailable or len(job.Tasks or {}),
                       f"job {job.Namespace or 'default'}/{job.Name}: minMember", 0, MAX_GANG_PODS)
    if gpus is None:
        total = (spec.get("minResources") or {}).get("nvidia.com/gpu")
        gpus = parse_gpu_quantity(total, "job.PodGroup.spec.minResources") // size if total and size else 0
    if size < 1 or gpus < 1:
        return None
    par = annotations.get(ANNOTATION_PARALLELISM)
    member = Membership(f"{job.Namespace or 'default'}/{job.Name}", 0, size, "volcano-job",
                        Parallelism.parse(par) if par else None, annotations.get(ANNOTATION_RANK_ORDER),
                        gpus_per_pod=gpus)
    return gang_from_membership(member)


@_guard
def job_enqueueable(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """Permit a job the topology can place now, reject one it cannot, abstain for non-GPU jobs."""
    request = _decode(body, JobRequest)
    if request.job is None:
        return 400, ENCODER.encode({"error": "malformed request body: job is missing"})
    try:
        gang = _gang_of_job(scheduler, request.job)
        if gang is None:
            return _reply({"status": ABSTAIN})
        placement = scheduler.place(gang)
    except (JobSpecError, TopologyError, ValueError):
        return _reply({"status": REJECT})
    return _reply({"status": PERMIT if placement.placed else REJECT})


@_guard
def job_ready(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """meshfit holds no extra readiness condition (the gang plugin counts minMember)."""
    _decode(body, JobRequest)
    return _reply({"status": True})


@_guard
def predicate(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """Whether the task may go to the node: a gang task only to its reserved node."""
    request = _decode(body, PredicateRequest)
    if request.task is None or not request.task.Pod or request.node is None:
        return 400, ENCODER.encode({"error": "malformed request body: task.Pod and node are required"})
    _check_pod(request.task.Pod, "task.Pod")
    decision = scheduler.filter(request.task.Pod, [request.node.Name], offered_is_complete=False)
    if decision.error:
        return _reply({"status": decision.error, "code": CODE_ERROR})
    if request.node.Name in decision.nodes:
        return _reply({"status": "", "code": CODE_SUCCESS})
    return _reply({"status": decision.failed.get(request.node.Name, "rejected"), "code": CODE_UNSCHEDULABLE})


@_guard
def prioritize(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """Scores 0..100 (Volcano's node-order scale): the reserved node 100 for a gang task."""
    request = _decode(body, PrioritizeRequest)
    if request.task is None or not request.task.Pod:
        return 400, ENCODER.encode({"error": "malformed request body: task.Pod is required"})
    _check_pod(request.task.Pod, "task.Pod")
    names = [n.Name for n in request.nodes or []]
    scores = scheduler.prioritize(request.task.Pod, names)
    return _reply({"nodeScore": {name: float(score * 10) for name, score in scores}, "errorMessage": ""})


@_guard
def preemptable(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """The evictees that may go: never part of a gang."""
    request = _decode(body, EvictRequest)
    raw = request.evictees or []
    tasks = [msgspec.json.decode(r, type=TaskInfo) for r in raw]
    for i, task in enumerate(tasks):
        _check_pod(task.Pod, f"evictees[{i}].Pod")
    pods = {t.UID: t.Pod for t in tasks if t.Pod}
    allowed = set(scheduler.whole_gang_victims([t.UID for t in tasks], pods))
    victims = [r for r, t in zip(raw, tasks) if t.UID in allowed]
    return _reply({"status": PERMIT, "victims": victims})


@_guard
def queue_overused(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """meshfit does no queue accounting."""
    return _reply({"overused": False})


HANDLERS = {
    "onSessionOpen": _guard(on_session_open),
    "onSessionClose": on_session_close,
    "jobEnqueueable": job_enqueueable,
    "jobReady": job_ready,
    "predicate": predicate,
    "prioritize": prioritize,
    "preemptable": preemptable,
    "reclaimable": preemptable,
    "queueOverused": queue_overused,
}
"""Verb name (as in Volcano's extender.*Verb arguments) -> handler."""
