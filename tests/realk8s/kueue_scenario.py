"""Scenario helpers for end-to-end tests with a real Kueue: queues, Indexed Jobs queued in them, and waits.

A test's queue is a ResourceFlavor over the test's nodes (label `example.com/pool: <namespace>`; TAS when
`levels` are given), an optional meshfit AdmissionCheck (plus any others), a ClusterQueue with GPU quota and the
LocalQueue `training` in the test's namespace.  Jobs are batch/v1 Indexed Jobs labelled
`kueue.x-k8s.io/queue-name`; the real Job controller creates their pods once Kueue unsuspends them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from tests.realk8s.cluster_builders import GPU, LEAF_LABEL, SPINE_LABEL, wait_for
from tests.realk8s.kueue_objects import (
    HOSTNAME, KueueObjects, admission_check, check_state, cluster_queue, condition, indexed_job, is_admitted,
    local_queue, resource_flavor, topology,
)

POOL = "example.com/pool"
LEVELS = {"hostname": (SPINE_LABEL, LEAF_LABEL, HOSTNAME), "leaf": (SPINE_LABEL, LEAF_LABEL)}
JOB_LABEL = "batch.kubernetes.io/job-name"
INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass
class KueueQueue:
    """The objects of one test's queue."""

    objects: KueueObjects
    namespace: str
    cluster: str
    checks: list[str] = field(default_factory=list)
    local: str = "training"

    @property
    def meshfit_check(self) -> str:
        """The name of meshfit's AdmissionCheck of this queue."""
        return f"{self.namespace}-meshfit"


def make_queue(objects: KueueObjects, namespace: str, gpus: int, levels: Sequence[str] | None = None,
               meshfit_check: bool = True, other_checks: Iterable[str] = ()) -> KueueQueue:
    """Flavor (+ Topology), checks, ClusterQueue of `gpus` GPUs and LocalQueue `training`."""
    topology_name = f"{namespace}-topology" if levels else None
    if levels:
        objects.create(topology(topology_name, levels))
    flavor = f"{namespace}-gpu"
    objects.create(resource_flavor(flavor, topology_name, {POOL: namespace}))
    queue = KueueQueue(objects, namespace, f"{namespace}-cq")
    if meshfit_check:
        objects.create(admission_check(queue.meshfit_check))
        queue.checks.append(queue.meshfit_check)
    for name in other_checks:
        objects.create(admission_check(name, controller="example.com/manual"))
        queue.checks.append(name)
    objects.create(cluster_queue(queue.cluster, flavor, gpus, queue.checks))
    objects.create(local_queue(queue.local, namespace, queue.cluster))
    return queue


def wait_queue_active(queue: KueueQueue, timeout: float = 60.0, describe: Any = None) -> None:
    """Until the ClusterQueue is Active (its checks active, its flavor known)."""
    wait_for(lambda: (c := condition(queue.objects.get("ClusterQueue", queue.cluster), "Active"))
             and c.get("status") == "True", timeout=timeout, message=f"ClusterQueue {queue.cluster} Active",
             describe=describe)


def submit(api_client: Any, queue: KueueQueue, name: str, pods: int, gpus: int = 8,
           annotations: Mapping[str, str] | None = None) -> float:
    """Create an Indexed Job in the queue; returns the wall-clock time it was created."""
    from kubernetes.client import BatchV1Api

    body = indexed_job(queue.namespace, name, pods, gpus, queue.local, template_annotations=annotations)
    body["spec"]["template"]["spec"]["nodeSelector"] = {POOL: queue.namespace}
    BatchV1Api(api_client).create_namespaced_job(queue.namespace, body)
    return time.time()


def job_pods(core: Any, namespace: str, job: str) -> list[Any]:
    """The live pods of Job `job` (no deletionTimestamp)."""
    return [p for p in core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job}").items
            if p.metadata.deletion_timestamp is None]


def bound_count(core: Any, namespace: str, job: str) -> tuple[int, int]:
    """(pods bound, pods) of Job `job`."""
    pods = job_pods(core, namespace, job)
    return sum(1 for p in pods if p.spec.node_name), len(pods)


def wait_job_bound(core: Any, namespace: str, job: str, pods: int, timeout: float, describe: Any = None) -> float:
    """Until all `pods` pods of `job` are bound; returns the wall-clock time it happened."""
    wait_for(lambda: bound_count(core, namespace, job) == (pods, pods), timeout=timeout, interval=0.2,
             message=lambda _: f"all {pods} pods of {job} bound, now {bound_count(core, namespace, job)}",
             describe=describe)
    return time.time()


def workload_of(queue: KueueQueue, job: str) -> dict | None:
    """The Workload of `job`."""
    return queue.objects.workload_of(job)


def check_of(queue: KueueQueue, job: str, check: str | None = None) -> dict | None:
    """The state entry of meshfit's check (or `check`) on `job`'s Workload."""
    return check_state(workload_of(queue, job), check or queue.meshfit_check)


def admitted(queue: KueueQueue, job: str) -> bool:
    """True once `job`'s Workload is Admitted."""
    return is_admitted(workload_of(queue, job))


def placement(core: Any, namespace: str, job: str) -> dict[int, tuple[str, dict, dict]]:
    """Completion index -> (node, nodeSelector, annotations) of `job`'s pods."""
    return {int(p.metadata.annotations[INDEX]): (p.spec.node_name, dict(p.spec.node_selector or {}),
                                                  dict(p.metadata.annotations or {}))
            for p in job_pods(core, namespace, job)}


def activate_check(objects: KueueObjects, name: str) -> None:
    """Play another check's controller: mark AdmissionCheck `name` Active (its Workloads stay Pending on it)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    objects.api.patch_cluster_custom_object_status(
        "kueue.x-k8s.io", "v1beta2", "admissionchecks", name,
        {"status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "test",
                                    "lastTransitionTime": stamp}]}})


def gpu_pod(namespace: str, name: str, node: str, gpus: int = 8) -> dict:
    """A pod already bound to `node` (created with nodeName) holding `gpus` GPUs: capacity taken outside Kueue."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}
