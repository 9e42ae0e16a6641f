"""Builders for pods and job objects as the Kubernetes API returns them (plain dicts)."""

from __future__ import annotations

from typing import Any

from plugins.gangs.base import api_group, qualified_kind, split_kind


def make_pod(name: str = "p-0", namespace: str = "default", gpus: int = 8, labels: dict | None = None,
             annotations: dict | None = None, owner: tuple[str, str, str] | None = None,
             env: dict[str, str] | None = None, node: str | None = None, uid: str | None = None) -> dict:
    """A pending pod; `owner` is (apiVersion, kind, name)."""
    container: dict[str, Any] = {"name": "main", "image": "train:latest"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
                            "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2],
                                    "uid": f"uid-{owner[2]}", "controller": True}]
    spec: dict[str, Any] = {"containers": [container], "schedulerName": "meshfit"}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def pod_template(gpus: int = 8, annotations: dict | None = None) -> dict:
    """A pod template with `gpus` GPUs per pod."""
    return {"metadata": {"annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "main", "image": "train:latest",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def make_jobset(name: str, rjobs: list[tuple[str, int, int]], namespace: str = "default", gpus: int = 8,
                annotations: dict | None = None) -> dict:
    """A JobSet with replicated jobs given as (name, replicas, pods per Job)."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": {"replicatedJobs": [
                {"name": r, "replicas": replicas,
                 "template": {"spec": {"parallelism": ppj, "completions": ppj, "completionMode": "Indexed",
                                       "template": pod_template(gpus)}}}
                for r, replicas, ppj in rjobs]}}


def jobset_pods(jobset: dict, gpus: int = 8) -> list[dict]:
    """The pods the JobSet controller would create, with its labels and annotations."""
    name, namespace = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
    pods, global_index = [], 0
    rjobs = jobset["spec"]["replicatedJobs"]
    total = sum(r["replicas"] for r in rjobs)
    for rjob in rjobs:
        ppj = rjob["template"]["spec"]["parallelism"]
        for job_index in range(rjob["replicas"]):
            job_name = f"{name}-{rjob['name']}-{job_index}"
            for completion in range(ppj):
                labels = {"jobset.sigs.k8s.io/jobset-name": name,
                          "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                          "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob["replicas"]),
                          "jobset.sigs.k8s.io/job-index": str(job_index),
                          "jobset.sigs.k8s.io/job-global-index": str(global_index),
                          "jobset.sigs.k8s.io/global-replicas": str(total),
                          "batch.kubernetes.io/job-completion-index": str(completion)}
                pods.append(make_pod(f"{job_name}-{completion}-x", namespace, gpus, labels=labels,
                                     annotations={"batch.kubernetes.io/job-completion-index": str(completion)},
                                     owner=("batch/v1", "Job", job_name)))
            global_index += 1
    return pods


class ObjectStore:
    """A `lookup(kind, namespace, name)` over a list of objects (keyed by `group/Kind`, like ClusterState)."""

    def __init__(self, *objects: dict) -> None:
        self.objects = {(qualified_kind(api_group(o.get("apiVersion")), o["kind"]),
                         o["metadata"].get("namespace") or "default", o["metadata"]["name"]): o for o in objects}

    def __call__(self, kind: str, namespace: str, name: str) -> dict | None:
        group, plain = split_kind(kind)
        for (stored, ns, n), obj in self.objects.items():
            if (ns, n) == (namespace or "default", name) and (stored == kind or (group is None and split_kind(stored)[1] == plain)):
                return obj
        return None
