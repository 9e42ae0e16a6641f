"""The API resources the cache lists and watches: Nodes, Pods, gang objects and topology objects."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WatchedResource:
    """One API resource: group ("" = core), version, plural, kind, and where its objects go in the state."""

    group: str
    version: str
    plural: str
    kind: str
    sink: str = "object"
    """"node", "pod" or "object" (ClusterState.upsert_node / upsert_pod / upsert_object)."""

    @property
    def api_version(self) -> str:
        """`v1` or `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The cluster-wide collection path (all namespaces)."""
        prefix = "/api" if not self.group else f"/apis/{self.group}"
        return f"{prefix}/{self.version}/{self.plural}"

    @property
    def name(self) -> str:
        """`plural.group` (or `plural` for core), as kubectl names resources."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = WatchedResource("", "v1", "nodes", "Node", "node")
PODS = WatchedResource("", "v1", "pods", "Pod", "pod")

DEFAULT_RESOURCES: tuple[WatchedResource, ...] = (
    NODES,
    PODS,
    WatchedResource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    WatchedResource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"),
    WatchedResource("batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    WatchedResource("batch", "v1", "jobs", "Job"),
    WatchedResource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    WatchedResource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    WatchedResource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    WatchedResource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    WatchedResource("kueue.x-k8s.io", "v1beta2", "topologies", "Topology"),
    WatchedResource("kueue.x-k8s.io", "v1beta2", "admissionchecks", "AdmissionCheck"),
    WatchedResource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
    WatchedResource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup"),
    WatchedResource("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup"),
    WatchedResource("kai.scheduler", "v1alpha1", "topologies", "Topology"),
    WatchedResource("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode"),
)
"""Everything meshfit reads; a custom resource whose CRD is not installed is skipped (404 tolerated).  The versions
of drifting APIs (Kubernetes' Workload / PodGroup, Kueue's) are replaced by what discovery finds served
(`scheduler.kube.discovery`)."""
