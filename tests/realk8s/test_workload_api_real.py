"""Kubernetes' own gang API on a real control plane: `scheduling.k8s.io/v1alpha1` Workloads with kube-scheduler's
in-tree `GangScheduling` plugin on, meshfit as extender (issue 18, item 4).

A control plane of its own per module (the suite's shared one runs with default gates): the apiserver and
kube-scheduler get `GenericWorkload=true,GangScheduling=true`, the apiserver serves `scheduling.k8s.io/v1alpha1`.
kube-scheduler then holds a pod group's members in PreEnqueue until `minCount` exist and at Permit until all are
assumed; meshfit filters and scores each member (topology, ranks) and its `/bind` posts the Bindings that carry
the assignment.  Skipped below 1.35, and with the reason when the binaries predate the Workload API.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.handoff.assignment import parse_assignment
from scheduler.kube.api import request_bytes
from tests.realk8s.binaries import K8sInstall
from tests.realk8s.cluster_builders import (
    GPU, LEAF_LABEL, PARALLELISM, SCHEDULER_NAME, create_nodes, wait_for,
)
from tests.realk8s.conftest import _admin_client, clean_slate
from tests.realk8s.controlplane import ControlPlane, MeshfitProcess

GATES = "GenericWorkload=true,GangScheduling=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha1=true"
GROUP, VERSION = "scheduling.k8s.io", "v1alpha1"
GANG_LABEL = "test.meshfit.io/gang"
GPUS = 8


@pytest.fixture(scope="module")
def gated_plane(request: pytest.FixtureRequest, k8s_install: K8sInstall) -> ControlPlane:
    """A control plane with the Workload API and the GangScheduling plugin on (1.35+ binaries only)."""
    if not k8s_install.at_least(1, 35):
        pytest.skip(f"the Workload API is Kubernetes 1.35+; these binaries are {k8s_install.full}")
    plane = ControlPlane(k8s_install, feature_gates=GATES, runtime_config=RUNTIME_CONFIG)
    request.addfinalizer(plane.stop)
    try:
        plane.start()
    except Exception as exc:  # noqa: BLE001 - a tree from before the Workload API does not know the gates
        logs = plane.tail_logs(20)
        plane.stop()
        if "unrecognized feature gate" in logs or "unknown api groups" in logs.lower():
            pytest.skip(f"kube-apiserver {k8s_install.full} predates the Workload API ({GATES})")
        pytest.fail(f"control plane with {GATES} did not start: {exc}\n{logs}", pytrace=False)
    from kubernetes.client import ApisApi
    client = _admin_client(plane)
    groups = {g.name: [v.version for v in g.versions] for g in ApisApi(client).get_api_versions().groups}
    client.close()
    if VERSION not in groups.get(GROUP, []):
        pytest.skip(f"kube-apiserver {k8s_install.full} does not serve {GROUP}/{VERSION}")
    plane.namespaces = []
    return plane


@pytest.fixture
def wl(gated_plane: ControlPlane, request: pytest.FixtureRequest):
    """A clean namespace on the gated control plane, meshfit serve and kube-scheduler (gates on) started."""
    from kubernetes.client import CustomObjectsApi
    env = clean_slate(gated_plane)
    meshfit = MeshfitProcess(gated_plane.kubeconfig, gated_plane.logs / f"meshfit-{env.namespace}.log")

    def finish() -> None:
        gated_plane.stop_scheduler()
        meshfit.stop()
        env.api_client.close()

    request.addfinalizer(finish)
    meshfit.start()
    env.extra_logs.append(meshfit.process)
    gated_plane.start_scheduler(meshfit.url)
    env.custom = CustomObjectsApi(env.api_client)
    return env


def create_workload(env: Any, name: str, min_count: int) -> None:
    """A Workload with one pod group `workers` whose policy is a gang of `min_count`."""
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, "workloads", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}})


def create_members(env: Any, workload: str, size: int, indexes: list[int], parallelism: str) -> None:
    """Pods `indexes` of a Workload gang: `spec.workloadRef` (raw JSON: the client has no typed field yet)."""
    for i in indexes:
        request_bytes(env.api_client, "POST", f"/api/v1/namespaces/{env.namespace}/pods", body={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload}-{i}", "labels": {GANG_LABEL: workload},
                         "annotations": {"meshfit.io/pod-index": str(i), PARALLELISM: parallelism}},
            "spec": {"schedulerName": SCHEDULER_NAME, "workloadRef": {"name": workload, "podGroup": "workers"},
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                     "resources": {"limits": {GPU: str(GPUS)}, "requests": {GPU: str(GPUS)}}}]}})


def members(env: Any, workload: str) -> dict[int, Any]:
    """The gang's pods by index, read as raw JSON (the typed client refuses `spec.workloadRef`)."""
    raw = request_bytes(env.api_client, "GET", f"/api/v1/namespaces/{env.namespace}/pods",
                        query=[("labelSelector", f"{GANG_LABEL}={workload}")])
    pods = {}
    for item in json.loads(raw)["items"]:
        meta, spec = item["metadata"], item["spec"]
        assert spec["workloadRef"] == {"name": workload, "podGroup": "workers"}, spec.get("workloadRef")
        pods[int(meta["annotations"]["meshfit.io/pod-index"])] = SimpleNamespace(
            name=meta["name"], annotations=meta.get("annotations") or {}, node_name=spec.get("nodeName"))
    return pods


def assert_no_overcommit(core: Any) -> None:
    """No node's bound pods request more GPUs than it has (pods read raw: the typed client refuses workloadRef)."""
    allocatable = {n.metadata.name: int((n.status.allocatable or {}).get(GPU, 0)) for n in core.list_node().items}
    used: dict[str, int] = {}
    for pod in json.loads(request_bytes(core.api_client, "GET", "/api/v1/pods"))["items"]:
        node = pod["spec"].get("nodeName")
        if node and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            used[node] = used.get(node, 0) + sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
                                                 for c in pod["spec"]["containers"])
    over = {node: (gpus, allocatable.get(node, 0)) for node, gpus in used.items() if gpus > allocatable.get(node, 0)}
    assert not over, f"GPU overcommit (requested, allocatable) per node: {over}"


def bound_count(env: Any, workload: str) -> tuple[int, int]:
    """(bound, created) members of the gang."""
    pods = members(env, workload).values()
    return sum(1 for p in pods if p.node_name), len(pods)


def assert_none_bound_for(env: Any, workload: str, seconds: float) -> None:
    """Over `seconds`, no member of the gang is ever bound and no node is over-committed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert bound_count(env, workload)[0] == 0, f"{workload} partly bound: {bound_count(env, workload)}"
        assert_no_overcommit(env.core)
        time.sleep(0.5)


def assert_whole_with_ranks(env: Any, workload: str, size: int) -> dict[int, str]:
    """Every member bound, each told its ranks and pod 0's real node as rendezvous; returns index -> node."""
    pods = members(env, workload)
    assert sorted(pods) == list(range(size)) and all(p.node_name for p in pods.values()), bound_count(env, workload)
    nodes = {i: p.node_name for i, p in pods.items()}
    assignments = {i: parse_assignment(p.annotations) for i, p in pods.items()}
    ranks = sorted(r for a in assignments.values() for r in a.ranks)
    assert ranks == list(range(size * GPUS)), ranks
    assert {a.master_addr for a in assignments.values()} == {nodes[0]}, (assignments, nodes)
    assert {a.world_size for a in assignments.values()} == {size * GPUS}
    assert_no_overcommit(env.core)
    return nodes


def leaf_of(env: Any, node: str) -> str:
    """The node's leaf label."""
    return env.core.read_node(node).metadata.labels[LEAF_LABEL]


def test_a_workload_gang_binds_whole_in_one_leaf_with_ranks_only_once_every_member_exists(wl):
    create_nodes(wl.core, 12, gpus=GPUS, leaf_size=4)  # three leaves of 4 nodes
    create_workload(wl, "train", 4)
    create_members(wl, "train", 4, [3, 1, 0], "tp=8,dp=4")  # one member short of minCount
    assert_none_bound_for(wl, "train", 6.0)
    create_members(wl, "train", 4, [2], "tp=8,dp=4")
    wait_for(lambda: bound_count(wl, "train") == (4, 4), timeout=60,
             message=lambda: f"gang not bound whole: {bound_count(wl, 'train')}\n{wl.tail_logs(30)}")
    nodes = assert_whole_with_ranks(wl, "train", 4)
    assert len(set(nodes.values())) == 4
    assert len({leaf_of(wl, n) for n in nodes.values()}) == 1, nodes  # topology-aware: one leaf holds it


def test_a_workload_gang_that_does_not_fit_waits_whole_then_binds_whole(wl):
    create_nodes(wl.core, 3, gpus=GPUS, leaf_size=4)  # 24 GPUs: a gang of 4 x 8 does not fit
    create_workload(wl, "big", 4)
    create_members(wl, "big", 4, [0, 1, 2, 3], "tp=8,dp=4")
    assert_none_bound_for(wl, "big", 8.0)
    create_nodes(wl.core, 1, gpus=GPUS, leaf_size=4, start=3)  # room for the whole gang in the same leaf
    wait_for(lambda: bound_count(wl, "big") == (4, 4), timeout=90,
             message=lambda: f"gang not bound whole after room freed: {bound_count(wl, 'big')}\n{wl.tail_logs(30)}")
    assert_whole_with_ranks(wl, "big", 4)


def test_two_workload_gangs_racing_for_one_leaf_never_leave_either_partly_bound(wl):
    create_nodes(wl.core, 6, gpus=GPUS, leaf_size=6)  # room for one gang of 4 only
    create_workload(wl, "a", 4)
    create_workload(wl, "b", 4)
    for i in range(4):  # members of the two gangs interleaved
        create_members(wl, "a", 4, [i], "tp=8,dp=4")
        create_members(wl, "b", 4, [3 - i], "tp=8,dp=4")
    wait_for(lambda: 4 in (bound_count(wl, "a")[0], bound_count(wl, "b")[0]), timeout=60,
             message=lambda: f"no gang bound whole: a {bound_count(wl, 'a')}, b {bound_count(wl, 'b')}")
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:  # the other one waits whole: never partly bound
        counts = sorted([bound_count(wl, "a")[0], bound_count(wl, "b")[0]])
        assert counts == [0, 4], counts
        assert_no_overcommit(wl.core)
        time.sleep(0.5)
    winner = "a" if bound_count(wl, "a")[0] == 4 else "b"
    assert_whole_with_ranks(wl, winner, 4)
