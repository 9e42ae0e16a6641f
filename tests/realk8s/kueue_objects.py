"""Kueue objects for real-control-plane tests: builders (v1beta2) and a small client over `CustomObjectsApi`.

Every test makes its own Topology / ResourceFlavor / ClusterQueue / LocalQueue / AdmissionCheck with
names unique to its namespace and deletes them at its end (`KueueObjects.cleanup`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CHECK_CONTROLLER = "meshfit.io/topology"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
PLURALS = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues", "AdmissionCheck": "admissionchecks", "Workload": "workloads"}


def topology(name: str, levels: Sequence[str]) -> dict:
    """A Kueue `Topology` over node-label keys, outermost first."""
    return {"apiVersion": API_VERSION, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": key} for key in levels]}}


def resource_flavor(name: str, topology_name: str | None = None, node_labels: Mapping[str, str] | None = None) -> dict:
    """A `ResourceFlavor`, TAS when `topology_name` is given."""
    spec: dict = {"nodeLabels": dict(node_labels or {})}
    if topology_name:
        spec["topologyName"] = topology_name
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, gpus: int, checks: Iterable[str] = (), cpu: str = "1000",
                  memory: str = "16Ti") -> dict:
    """A `ClusterQueue` with GPU quota on one flavor; admission checks under `admissionChecksStrategy`."""
    spec: dict = {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
        "coveredResources": ["cpu", "memory", GPU],
        "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                   {"name": "memory", "nominalQuota": memory},
                                                   {"name": GPU, "nominalQuota": gpus}]}]}]}
    checks = list(checks)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict:
    """A `LocalQueue` in `namespace` feeding `cluster_queue_name`."""
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def admission_check(name: str, controller: str = CHECK_CONTROLLER) -> dict:
    """An `AdmissionCheck` served by `controller` (meshfit's by default)."""
    return {"apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": controller}}


def indexed_job(namespace: str, name: str, pods: int, gpus: int, queue: str, parallelism: str | None = None,
                template_annotations: Mapping[str, str] | None = None, cpu: str = "100m") -> dict:
    """A batch/v1 Indexed Job of `pods` x `gpus` GPUs for meshfit, queued in Kueue LocalQueue `queue`."""
    annotations = {"meshfit.io/parallelism": parallelism or f"tp={gpus},dp={pods}", **(template_annotations or {})}
    resources = {GPU: str(gpus), "cpu": cpu}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "suspend": True,
                     "backoffLimit": 0, "template": {
                         "metadata": {"annotations": annotations},
                         "spec": {"schedulerName": "meshfit", "restartPolicy": "Never",
                                  "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                                  "resources": {"requests": dict(resources),
                                                                "limits": {GPU: str(gpus)}}}]}}}}


class KueueObjects:
    """Create, read and delete Kueue objects; remembers what it created for `cleanup`."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes.client import CustomObjectsApi

        self.api = CustomObjectsApi(api_client)
        self.namespace = namespace
        self.created: list[tuple[str, str | None, str]] = []

    def create(self, obj: dict) -> dict:
        """Create one object (cluster-scoped or namespaced, from its metadata)."""
        plural, meta = PLURALS[obj["kind"]], obj["metadata"]
        if meta.get("namespace"):
            made = self.api.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], plural, obj)
        else:
            made = self.api.create_cluster_custom_object(GROUP, VERSION, plural, obj)
        self.created.append((plural, meta.get("namespace"), meta["name"]))
        return made

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """One object, None when absent."""
        from kubernetes.client.exceptions import ApiException

        try:
            if namespace:
                return self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)
            return self.api.get_cluster_custom_object(GROUP, VERSION, PLURALS[kind], name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def workloads(self) -> list[dict]:
        """The Workloads of this namespace."""
        return self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads")["items"]

    def workload_of(self, job: str) -> dict | None:
        """The Workload Kueue made for Job `job` (its owner), None before it exists."""
        for workload in self.workloads():
            owners = workload["metadata"].get("ownerReferences") or ()
            if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
                return workload
        return None

    def cleanup(self) -> None:
        """Delete what was created, newest first (Workloads of the namespace before the queues)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_collection_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads")
        except ApiException:
            pass
        for plural, namespace, name in reversed(self.created):
            try:
                if namespace:
                    self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
                else:
                    self.api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException:
                pass
        self.created = []


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict | None:
    """The status condition of type `kind`, None when absent."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return cond
    return None


def check_state(workload: Mapping[str, Any] | None, check: str) -> dict | None:
    """The workload's state entry for admission check `check`, None when absent."""
    for state in ((workload or {}).get("status") or {}).get("admissionChecks") or ():
        if state.get("name") == check:
            return state
    return None


def is_admitted(workload: Mapping[str, Any] | None) -> bool:
    """True when the workload's `Admitted` condition is True."""
    found = condition(workload, "Admitted")
    return bool(found and found.get("status") == "True")
