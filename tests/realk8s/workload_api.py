"""Kubernetes' own gang API on a real control plane, per served version: the gates each version needs, the objects
each version's API takes, and reads of the members (raw JSON: the Python client has no typed field for
`spec.workloadRef` / `spec.schedulingGroup`).

- 1.35 serves `scheduling.k8s.io/v1alpha1`: a `Workload` lists `podGroups[]` (`policy.gang.minCount`), pods point
  at one with `spec.workloadRef`.  Gates `GenericWorkload`, `GangScheduling`.
- 1.36 serves `v1alpha2`: a `Workload` with `podGroupTemplates[]`, a `PodGroup` (`schedulingPolicy.gang.minCount`,
  `schedulingConstraints.topology[].key`), pods join with `spec.schedulingGroup.podGroupName`.  Gates
  `GenericWorkload`, `GangScheduling`, `TopologyAwareWorkloadScheduling` (without it the apiserver silently drops
  `schedulingConstraints`) on the apiserver and kube-scheduler.
- 1.37 serves `v1beta1` (v1alpha2 is gone): the same Workload and PodGroup policy and constraints; a PodGroup
  names its template with `spec.workloadRef: {workloadName, templateName}`.  Gates `GenericWorkload` (beta, off by
  default; it now carries gang scheduling: the `GangScheduling` gate is gone) and
  `TopologyAwareWorkloadScheduling`; `CompositePodGroup` (alpha) serves `v1alpha3` CompositePodGroups.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from scheduler.handoff.assignment import ANNOTATION_POD_INDEX
from scheduler.kube.api import request_bytes
from tests.realk8s.binaries import K8sInstall
from tests.realk8s.cluster_builders import GPU, PARALLELISM, SCHEDULER_NAME

GROUP = "scheduling.k8s.io"
GATES = {
    "v1alpha1": "GenericWorkload=true,GangScheduling=true",
    "v1alpha2": "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true",
    "v1beta1": "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true",
}
"""API version -> the feature gates (apiserver and kube-scheduler) that serve it and its scheduling."""


COMPOSITE_VERSION = "v1alpha3"
"""1.37's CompositePodGroup API version (gate `CompositePodGroup`)."""


def api_version_for(install: K8sInstall) -> str:
    """The Workload API version a Kubernetes version serves when its gates are on (1.35: v1alpha1, 1.36: v1alpha2,
    1.37+: v1beta1)."""
    if install.at_least(1, 37):
        return "v1beta1"
    return "v1alpha2" if install.at_least(1, 36) else "v1alpha1"


def gated_plane_options(install: K8sInstall) -> dict[str, str]:
    """`ControlPlane` keyword arguments turning the version's Workload API and in-tree gang scheduling on."""
    version = api_version_for(install)
    runtime = f"{GROUP}/{version}=true"
    if version == "v1beta1":
        runtime += f",{GROUP}/{COMPOSITE_VERSION}=true"
    return {"feature_gates": GATES[version], "runtime_config": runtime}


def _post(env: Any, path: str, body: dict) -> None:
    request_bytes(env.api_client, "POST", path, body=body)


def create_v1alpha1_workload(env: Any, name: str, min_count: int) -> None:
    """1.35: a Workload with one pod group `workers` whose policy is a gang of `min_count`."""
    _post(env, f"/apis/{GROUP}/v1alpha1/namespaces/{env.namespace}/workloads", {
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "Workload", "metadata": {"name": name},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}})


def template_ref(api: str, workload: str, template: str) -> dict:
    """How a PodGroup names its Workload's template: v1alpha2 `podGroupTemplateRef`, v1beta1 `workloadRef`."""
    if api == "v1alpha2":
        return {"podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": template}}}
    return {"workloadRef": {"workloadName": workload, "templateName": template}}


def create_pod_group_gang(env: Any, name: str, min_count: int, key: str | None, api: str = "v1alpha2") -> None:
    """1.36 (`v1alpha2`) or 1.37 (`v1beta1`): a Workload with a pod group template `workers` and its PodGroup `name`
    (gang of `min_count`, the required topology `key` when given)."""
    policy: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key:
        policy["schedulingConstraints"] = {"topology": [{"key": key}]}
    _post(env, f"/apis/{GROUP}/{api}/namespaces/{env.namespace}/workloads", {
        "apiVersion": f"{GROUP}/{api}", "kind": "Workload", "metadata": {"name": name},
        "spec": {"podGroupTemplates": [{"name": "workers", **policy}]}})
    _post(env, f"/apis/{GROUP}/{api}/namespaces/{env.namespace}/podgroups", {
        "apiVersion": f"{GROUP}/{api}", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {**template_ref(api, name, "workers"), **policy}})


def create_composite_gang(env: Any, name: str, children: int, min_count: int, spine_key: str,
                          leaf_key: str) -> list[str]:
    """1.37 (`v1beta1` + `v1alpha3`): a Workload whose composite template `job` needs all `children` sub-groups
    (`minGroupCount`) inside one domain of `spine_key`, each sub-group a gang of `min_count` inside one domain of
    `leaf_key`; the CompositePodGroup `name` and its PodGroups `<name>-<i>`.  Returns the PodGroups' names."""
    child = {"schedulingPolicy": {"gang": {"minCount": min_count}},
             "schedulingConstraints": {"topology": [{"key": leaf_key}]}}
    parent = {"schedulingPolicy": {"gang": {"minGroupCount": children}},
              "schedulingConstraints": {"topology": [{"key": spine_key}]}}
    _post(env, f"/apis/{GROUP}/v1beta1/namespaces/{env.namespace}/workloads", {
        "apiVersion": f"{GROUP}/v1beta1", "kind": "Workload", "metadata": {"name": name},
        "spec": {"compositePodGroupTemplates": [{"name": "job", **parent,
                                                 "podGroupTemplates": [{"name": "leaf", **child}]}]}})
    _post(env, f"/apis/{GROUP}/{COMPOSITE_VERSION}/namespaces/{env.namespace}/compositepodgroups", {
        "apiVersion": f"{GROUP}/{COMPOSITE_VERSION}", "kind": "CompositePodGroup", "metadata": {"name": name},
        "spec": {"workloadRef": {"workloadName": name, "templateName": "job"}, **parent}})
    names = [f"{name}-{i}" for i in range(children)]
    for group in names:
        _post(env, f"/apis/{GROUP}/v1beta1/namespaces/{env.namespace}/podgroups", {
            "apiVersion": f"{GROUP}/v1beta1", "kind": "PodGroup", "metadata": {"name": group},
            "spec": {"parentCompositePodGroupName": name, **template_ref("v1beta1", name, "leaf"), **child}})
    return names


def read_pod_group(env: Any, name: str, api: str = "v1alpha2") -> dict:
    """The PodGroup as the apiserver stored it."""
    return json.loads(request_bytes(env.api_client, "GET",
                                    f"/apis/{GROUP}/{api}/namespaces/{env.namespace}/podgroups/{name}"))


def create_member(env: Any, gang: str, pod: str, gpus: int, parallelism: str, api: str,
                  index: int | None = None) -> None:
    """One member pod of gang `gang`: `spec.workloadRef` (v1alpha1) or `spec.schedulingGroup` (v1alpha2, v1beta1); with
    `index` it carries `meshfit.io/pod-index`, else no index and no gang label of any kind."""
    annotations = {PARALLELISM: parallelism, **({ANNOTATION_POD_INDEX: str(index)} if index is not None else {})}
    join = ({"workloadRef": {"name": gang, "podGroup": "workers"}} if api == "v1alpha1"
            else {"schedulingGroup": {"podGroupName": gang}})
    _post(env, f"/api/v1/namespaces/{env.namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "annotations": annotations},
        "spec": {"schedulerName": SCHEDULER_NAME, **join,
                 "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                 "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}}]}})


def gang_of(pod: dict) -> str | None:
    """The gang a raw pod joins (Workload name or PodGroup name), None for other pods."""
    spec = pod.get("spec") or {}
    ref, group = spec.get("workloadRef") or {}, spec.get("schedulingGroup") or {}
    return ref.get("name") or group.get("podGroupName")


def raw_pods(env: Any) -> list[dict]:
    """Every pod of the test's namespace as raw JSON."""
    return json.loads(request_bytes(env.api_client, "GET", f"/api/v1/namespaces/{env.namespace}/pods"))["items"]


def members(env: Any, gang: str) -> list[SimpleNamespace]:
    """The gang's pods: name, annotations, node, and the PodScheduled condition's message."""
    found = []
    for pod in raw_pods(env):
        if gang_of(pod) != gang:
            continue
        conditions = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or ()}
        found.append(SimpleNamespace(
            name=pod["metadata"]["name"], annotations=pod["metadata"].get("annotations") or {},
            node_name=pod["spec"].get("nodeName"), waiting=(conditions.get("PodScheduled") or {}).get("message", "")))
    return found


def bound_count(env: Any, gang: str) -> tuple[int, int]:
    """(bound, created) members of the gang."""
    pods = members(env, gang)
    return sum(1 for p in pods if p.node_name), len(pods)
