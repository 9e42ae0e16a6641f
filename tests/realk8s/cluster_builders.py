"""Objects for real-API-server tests: GPU Nodes, Kubeflow-style gang pods, plain pods, and checks.

Nodes carry their `status` (capacity, allocatable, Ready) in the create body; with no kubelet the
API server keeps it as given.  Gang pods look like the Kubeflow training-operator's PyTorchJob
workers (labels + the `MASTER_ADDR` it injects), with no PyTorchJob object in the API: meshfit
then takes the gang size from `meshfit.io/parallelism` (world size / GPUs per pod).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from kubernetes.client import CoreV1Api

GPU = "nvidia.com/gpu"
SPINE_LABEL = "network.topology.nvidia.com/spine"
LEAF_LABEL = "network.topology.nvidia.com/leaf"
LEAVES_PER_SPINE = 4
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
OPERATOR_NAME = "training.kubeflow.org/operator-name"
PARALLELISM = "meshfit.io/parallelism"
SCHEDULER_NAME = "meshfit"

T = TypeVar("T")


def node_body(name: str, gpus: int, cpu: str, memory: str, labels: Mapping[str, str],
              taints: Sequence[Mapping[str, Any]] | None = None) -> dict:
    """A Node with capacity = allocatable (cpu, memory, 110 pods, GPUs) and Ready=True."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    body: dict = {"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                  "spec": {},
                  "status": {"capacity": dict(resources), "allocatable": dict(resources),
                             "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                             "message": "no kubelet: status set by the test"}]}}
    if taints:
        body["spec"]["taints"] = [dict(t) for t in taints]
    return body


def create_nodes(core: CoreV1Api, count: int, gpus: int = 8, leaf_size: int = 16, name_prefix: str = "n",
                 cpu: str = "64", memory: str = "512Gi", labels: Mapping[str, str] | None = None,
                 taints: Sequence[Mapping[str, Any]] | None = None, start: int = 0) -> list[str]:
    """Create `count` GPU Nodes with Topograph spine/leaf labels (leaf = index // leaf_size, 4 leaves/spine)."""
    names = []
    for i in range(start, start + count):
        leaf = i // leaf_size
        name = f"{name_prefix}{i:03d}"
        topo = {SPINE_LABEL: f"spine-{leaf // LEAVES_PER_SPINE}", LEAF_LABEL: f"leaf-{leaf}"}
        body = node_body(name, gpus, cpu, memory, {**topo, **(labels or {})}, taints)
        created = core.create_node(body)
        if not (created.status and created.status.allocatable and created.status.allocatable.get(GPU)):
            core.patch_node_status(name, {"status": body["status"]})  # status dropped on create: set it
        names.append(name)
    return names


def _container(gpus: int, cpu: str | None, env: list[dict] | None = None) -> dict:
    limits: dict = {GPU: str(gpus)} if gpus else {}
    requests: dict = dict(limits)
    if cpu:
        requests["cpu"] = cpu
    container: dict = {"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                       "resources": {"limits": limits, "requests": requests}}
    if env:
        container["env"] = env
    return container


def gang_pod_body(namespace: str, name: str, index: int, pods: int, gpus_per_pod: int, parallelism: str,
                  priority_class: str | None = None, extra_spec: Mapping[str, Any] | None = None,
                  cpu: str | None = None) -> dict:
    """Worker `index` of PyTorchJob `name` as the training-operator creates it (no Master replica)."""
    env = [{"name": "MASTER_ADDR", "value": f"{name}-worker-0"}, {"name": "MASTER_PORT", "value": "23456"},
           {"name": "WORLD_SIZE", "value": str(pods)}, {"name": "RANK", "value": str(index)},
           {"name": "PYTHONUNBUFFERED", "value": "1"}]
    spec: dict = {"schedulerName": SCHEDULER_NAME, "restartPolicy": "OnFailure",
                  "containers": [_container(gpus_per_pod, cpu, env)]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    spec.update(extra_spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-worker-{index}", "namespace": namespace,
                         "labels": {JOB_NAME: name, REPLICA_TYPE: "worker", REPLICA_INDEX: str(index),
                                    OPERATOR_NAME: "pytorchjob-controller"},
                         "annotations": {PARALLELISM: parallelism}},
            "spec": spec}


def create_gang(core: CoreV1Api, namespace: str, name: str, pods: int, gpus_per_pod: int,
                parallelism: str | None = None, priority_class: str | None = None,
                extra_spec: Mapping[str, Any] | None = None, cpu: str | None = None,
                order: Sequence[int] | None = None, seed: int | None = None) -> list[str]:
    """Create the `pods` workers of a PyTorchJob-style gang in `order` (default: shuffled); returns pod names."""
    parallelism = parallelism or f"tp={gpus_per_pod},dp={pods}"
    indexes = list(order) if order is not None else random.Random(seed).sample(range(pods), pods)
    names = []
    for i in indexes:
        body = gang_pod_body(namespace, name, i, pods, gpus_per_pod, parallelism, priority_class, extra_spec, cpu)
        core.create_namespaced_pod(namespace, body)
        names.append(body["metadata"]["name"])
    return names


def create_plain_pods(core: CoreV1Api, namespace: str, prefix: str, count: int, gpus: int = 1,
                      cpu: str | None = None, scheduler_name: str = SCHEDULER_NAME,
                      priority_class: str | None = None, labels: Mapping[str, str] | None = None) -> list[str]:
    """Create `count` pods outside any gang: `gpus` GPUs each (0 = CPU-only, then `cpu` defaults to 100m)."""
    names = []
    for i in range(count):
        spec: dict = {"schedulerName": scheduler_name,
                      "containers": [_container(gpus, cpu or (None if gpus else "100m"))]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        name = f"{prefix}-{i}"
        core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod",
                                               "metadata": {"name": name, "namespace": namespace,
                                                            "labels": dict(labels or {})},
                                               "spec": spec})
        names.append(name)
    return names


def ensure_priority_class(api_client: Any, name: str, value: int, preemption_policy: str | None = None) -> None:
    """Create a PriorityClass unless it exists (the Priority admission plugin rejects unknown names)."""
    from kubernetes.client import SchedulingV1Api
    from kubernetes.client.rest import ApiException
    body: dict = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                  "value": value}
    if preemption_policy:
        body["preemptionPolicy"] = preemption_policy
    try:
        SchedulingV1Api(api_client).create_priority_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise


def pod_gpu_request(pod: Any) -> int:
    """GPUs requested by a pod (kubernetes model object), summed over app containers."""
    total = 0
    for container in pod.spec.containers or ():
        requests = (container.resources.requests if container.resources else None) or {}
        limits = (container.resources.limits if container.resources else None) or {}
        total += int(requests.get(GPU, limits.get(GPU, 0)))
    return total


def gang_status(core: CoreV1Api, namespace: str) -> dict[str, tuple[int, int]]:
    """{gang (PyTorchJob) name: (pods bound to a node, pods)} in `namespace`."""
    status: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for pod in core.list_namespaced_pod(namespace, label_selector=JOB_NAME).items:
        entry = status[pod.metadata.labels[JOB_NAME]]
        entry[0] += 1 if pod.spec.node_name else 0
        entry[1] += 1
    return {name: (bound, total) for name, (bound, total) in sorted(status.items())}


def assert_no_partial_gangs(core: CoreV1Api, namespace: str) -> None:
    """Every gang in `namespace` is either fully bound or not bound at all."""
    partial = {name: st for name, st in gang_status(core, namespace).items() if 0 < st[0] < st[1]}
    assert not partial, f"partially bound gangs (bound, total): {partial}"


def bound_gpus(core: CoreV1Api) -> dict[str, int]:
    """{node name: GPUs requested by pods bound to it} over all namespaces."""
    used: dict[str, int] = defaultdict(int)
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            used[pod.spec.node_name] += pod_gpu_request(pod)
    return dict(used)


def assert_no_overcommit(core: CoreV1Api) -> None:
    """No node is over-committed on any resource (`tests.realk8s.overcommit`)."""
    from tests.realk8s.overcommit import assert_no_overcommit as check

    check(core)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.25,
             message: str | Callable[[Any], str] = "", describe: Callable[[], str] | None = None) -> T:
    """Poll `predicate` until it returns a truthy value (returned); AssertionError with details on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            text = message(last) if callable(message) else message
            extra = f"\n{describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for "
                                 f"{text or getattr(predicate, '__name__', 'condition')}; last value: {last!r}{extra}")
        time.sleep(interval)


def pending_reasons(core: CoreV1Api, namespace: str, limit: int = 5) -> str:
    """The scheduler's latest FailedScheduling messages in `namespace` (for failure output)."""
    events = core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
    events.sort(key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp))
    lines = [f"{e.involved_object.name}: {e.message}" for e in events[-limit:]]
    return "FailedScheduling events:\n" + ("\n".join(lines) if lines else "(none)")


def names(objs: Iterable[Any]) -> list[str]:
    """metadata.name of kubernetes model objects."""
    return [o.metadata.name for o in objs]


# ----- Indexed batch/v1 Jobs (the real Job controller creates, and recreates, the members) -------------------
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "job-name"
"""Set on a Job's pods by every version (1.27+ also sets `batch.kubernetes.io/job-name`)."""


def indexed_job_body(namespace: str, name: str, pods: int, gpus_per_pod: int, parallelism: str | None = None,
                     priority_class: str | None = None, annotations: Mapping[str, str] | None = None,
                     backoff_limit: int = 1000, backoff_limit_per_index: int | None = None,
                     extra_spec: Mapping[str, Any] | None = None) -> dict:
    """An Indexed Job whose `pods` pods (completions = parallelism) form one meshfit gang of `gpus_per_pod` GPUs
    each; `meshfit.io/parallelism` (default `tp=<gpus>,dp=<pods>`) and `annotations` go on the pod template.

    `backoff_limit_per_index` (Kubernetes 1.29+, None = unset) makes the controller's recreation delay per
    completion index (10 s after an index's first failure) instead of job-wide (10 s x 2^(failures-1))."""
    spec: dict = {"schedulerName": SCHEDULER_NAME, "restartPolicy": "Never",
                  "containers": [_container(gpus_per_pod, None)]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    spec.update(extra_spec or {})
    template_annotations = {PARALLELISM: parallelism or f"tp={gpus_per_pod},dp={pods}", **(annotations or {})}
    job_spec: dict = {"completionMode": "Indexed", "completions": pods, "parallelism": pods,
                      "backoffLimit": backoff_limit,
                      "template": {"metadata": {"annotations": template_annotations}, "spec": spec}}
    if backoff_limit_per_index is not None:
        job_spec["backoffLimitPerIndex"] = backoff_limit_per_index
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": job_spec}


def create_indexed_job(api_client: Any, namespace: str, name: str, pods: int, gpus_per_pod: int,
                       **options: Any) -> dict:
    """Create an Indexed Job (`indexed_job_body` options); returns the body sent."""
    from kubernetes.client import BatchV1Api
    body = indexed_job_body(namespace, name, pods, gpus_per_pod, **options)
    BatchV1Api(api_client).create_namespaced_job(namespace, body)
    return body


def completion_index(pod: Any) -> int:
    """The completion index the Job controller gave a pod (annotation on every version, label from 1.28)."""
    return int((pod.metadata.annotations or {})[COMPLETION_INDEX])


def job_pods(core: CoreV1Api, namespace: str, job: str) -> tuple[dict[int, list[Any]], list[Any], list[Any]]:
    """Job `job`'s pods: ({completion index: live pods}, pods being deleted, finished pods kept as history).

    Live = not being deleted and not finished; a finished pod (Failed, Succeeded) not being deleted is what the
    Job controller leaves behind after a failure (it stays until the Job is deleted)."""
    live: dict[int, list[Any]] = defaultdict(list)
    terminating, finished = [], []
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}").items:
        if pod.metadata.deletion_timestamp is not None:
            terminating.append(pod)
        elif pod.status.phase in ("Failed", "Succeeded"):
            finished.append(pod)
        else:
            live[completion_index(pod)].append(pod)
    return dict(live), terminating, finished


def gpu_overcommit(core: CoreV1Api) -> dict[str, tuple[int, int]]:
    """{node: (GPUs requested by pods bound to it, allocatable)} for every existing node over its allocatable.

    Pods still bound to a deleted Node hold nothing (the machine is gone); pods being deleted still hold
    their GPUs (a kubelet would still be stopping them)."""
    allocatable = {n.metadata.name: int((n.status.allocatable or {}).get(GPU, 0)) for n in core.list_node().items}
    return {node: (used, allocatable[node]) for node, used in bound_gpus(core).items()
            if node in allocatable and used > allocatable[node]}
