"""Whole-gang, topology-first preemption on the real control plane (kube-apiserver + kube-scheduler + meshfit):
a high-priority gang evicts only whole lower-priority gangs in one leaf; equal priority and
`preemptionPolicy: Never` evict nothing; a lone GPU pod preempts through meshfit (the shipped profile has no
`DefaultPreemption`)."""

from __future__ import annotations

import time

import pytest

from tests.realk8s.cluster_builders import (
    LEAF_LABEL, create_gang, create_nodes, ensure_priority_class, wait_for,
)
from tests.realk8s.scenario import meshfit_events, wait_settled

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="kube-scheduler's preemption path (extender preempt verb, async preemption) differs by version")]

GPUS = 8


def in_leaf(leaf: int) -> dict:
    """A nodeSelector pinning a gang to one leaf (how the test lays out the low-priority gangs)."""
    return {"nodeSelector": {LEAF_LABEL: f"leaf-{leaf}"}}


def pods_by_gang(kube) -> dict[str, dict[str, tuple[str, str | None]]]:
    """{gang: {pod: (uid, node)}} in the test namespace."""
    found: dict[str, dict[str, tuple[str, str | None]]] = {}
    for pod in kube.core.list_namespaced_pod(kube.namespace, label_selector="training.kubeflow.org/job-name").items:
        gang = pod.metadata.labels["training.kubeflow.org/job-name"]
        found.setdefault(gang, {})[pod.metadata.name] = (pod.metadata.uid, pod.spec.node_name)
    return found


def leaf_of(kube, node: str) -> str:
    """The leaf label of a node."""
    return kube.core.read_node(node).metadata.labels[LEAF_LABEL]


def test_a_high_priority_gang_preempts_only_whole_lower_priority_gangs_in_one_leaf(kube, meshfit_scheduler):
    create_nodes(kube.core, 16, gpus=GPUS, leaf_size=8)  # leaf-0: n000-n007, leaf-1: n008-n015
    for name, value in (("low", 10), ("mid", 20), ("high", 1000)):
        ensure_priority_class(kube.api_client, name, value)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "a1", 4, GPUS, priority_class="low", extra_spec=in_leaf(0), seed=1)
    create_gang(kube.core, kube.namespace, "a2", 2, GPUS, priority_class="low", extra_spec=in_leaf(0), seed=2)
    create_gang(kube.core, kube.namespace, "a3", 2, GPUS, priority_class="low", extra_spec=in_leaf(0), seed=3)
    create_gang(kube.core, kube.namespace, "b", 4, GPUS, priority_class="mid", extra_spec=in_leaf(1), seed=4)
    create_gang(kube.core, kube.namespace, "vip", 4, GPUS, priority_class="high", extra_spec=in_leaf(1), seed=5)
    status = wait_settled(kube, stack, timeout=180.0,
                          until=lambda s: len(s) == 5 and all(b == t for b, t in s.values()))
    assert status == {"a1": (4, 4), "a2": (2, 2), "a3": (2, 2), "b": (4, 4), "vip": (4, 4)}  # the cluster is full
    before = pods_by_gang(kube)
    a1_nodes = {node for _, node in before["a1"].values()}

    # The cheapest plan: leaf-0, whose lowest priority is 10, and there the one 4-pod gang a1 (32 GPUs, one
    # victim) rather than a2 + a3 (32 GPUs, two victims); leaf-1 would evict priority 20, and vip never.
    create_gang(kube.core, kube.namespace, "urgent", 4, GPUS, priority_class="high", seed=6)
    status = wait_settled(kube, stack, timeout=240.0, quiet=5.0, until=lambda s: s.get("urgent") == (4, 4))
    after = pods_by_gang(kube)
    assert "a1" not in after, f"a1 must be evicted whole: {after.get('a1')}"
    for gang in ("a2", "a3", "b", "vip"):  # untouched: the very same pods, on the same nodes
        assert after[gang] == before[gang], gang
    urgent_nodes = {node for _, node in after["urgent"].values()}
    assert {leaf_of(kube, node) for node in urgent_nodes} == {"leaf-0"} and urgent_nodes == a1_nodes
    assert status == {"a2": (2, 2), "a3": (2, 2), "b": (4, 4), "vip": (4, 4), "urgent": (4, 4)}

    events = meshfit_events(kube.core, kube.namespace)
    preempted = {pod for pod, reason, _ in events if reason == "GangPreempted"}
    assert preempted == set(before["a1"]), events
    preempting = [message for _, reason, message in events if reason == "GangPreempting"]
    assert len(preempting) == 1 and "/a1 (priority 10)" in preempting[0] and "leaf-0" in preempting[0]
    metrics = wait_for(lambda: _metrics(stack), timeout=10.0)
    assert 'meshfit_gang_preemptions_total{preemptor="gang"} 1.0' in metrics
    assert 'meshfit_preempted_gpus_total{preemptor="gang"} 32.0' in metrics


def _metrics(stack) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{stack.meshfit.url}/metrics", timeout=5) as response:
        return response.read().decode()


def test_equal_priority_and_preemption_policy_never_preempt_nothing(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    ensure_priority_class(kube.api_client, "low", 10)
    ensure_priority_class(kube.api_client, "high-polite", 1000, preemption_policy="Never")
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "x", 4, GPUS, priority_class="low", seed=1)
    create_gang(kube.core, kube.namespace, "y", 4, GPUS, priority_class="low", seed=2)
    wait_settled(kube, stack, timeout=180.0, until=lambda s: s.get("x") == (4, 4) and s.get("y") == (4, 4))
    before = pods_by_gang(kube)
    create_gang(kube.core, kube.namespace, "peer", 2, GPUS, priority_class="low", seed=3)  # equal priority
    create_gang(kube.core, kube.namespace, "polite", 2, GPUS, priority_class="high-polite", seed=4)
    time.sleep(12.0)  # kube-scheduler's preemption attempts and meshfit's queue (3 s + ticks) have had their turn
    status = wait_settled(kube, stack, timeout=120.0, quiet=4.0)
    assert status == {"x": (4, 4), "y": (4, 4), "peer": (0, 2), "polite": (0, 2)}
    after = pods_by_gang(kube)
    assert {g: after[g] for g in ("x", "y")} == {g: before[g] for g in ("x", "y")}
    reasons = {reason for _, reason, _ in meshfit_events(kube.core, kube.namespace)}
    assert not reasons & {"GangPreempted", "GangPreempting"}, reasons


def lone_gpu_pod(namespace: str, name: str, priority_class: str) -> dict:
    """An 8-GPU pod of meshfit's profile that is not in a gang."""
    requests = {"nvidia.com/gpu": str(GPUS)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "meshfit", "priorityClassName": priority_class, "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}}


def test_a_lone_gpu_pod_preempts_through_meshfit_not_kube_scheduler(kube, meshfit_scheduler):
    """The shipped profile has no DefaultPreemption: meshfit evicts the cheapest lower-priority holder for a lone GPU
    pod, holds the freed node for it and nominates it there, and kube-scheduler binds it on that node."""
    create_nodes(kube.core, 2, gpus=GPUS, leaf_size=2)
    for name, value in (("low", 10), ("lower", 5), ("high", 1000)):
        ensure_priority_class(kube.api_client, name, value)
    stack = meshfit_scheduler()
    for name, priority in (("low-pod", "low"), ("lower-pod", "lower")):
        kube.core.create_namespaced_pod(kube.namespace, lone_gpu_pod(kube.namespace, name, priority))

    def bound() -> dict[str, str] | None:
        pods = kube.core.list_namespaced_pod(kube.namespace).items
        return {p.metadata.name: p.spec.node_name for p in pods} if all(p.spec.node_name for p in pods) else None

    nodes = wait_for(bound, timeout=60.0, message="the two low pods were never bound")
    kube.core.create_namespaced_pod(kube.namespace, lone_gpu_pod(kube.namespace, "urgent", "high"))

    def urgent_node() -> str | None:
        return kube.core.read_namespaced_pod("urgent", kube.namespace).spec.node_name

    node = wait_for(urgent_node, timeout=90.0, message="the urgent pod was never bound")
    assert node == nodes["lower-pod"]  # the cheaper victim's node
    names = {p.metadata.name for p in kube.core.list_namespaced_pod(kube.namespace).items}
    assert names == {"low-pod", "urgent"}, names
    events = meshfit_events(kube.core, kube.namespace)
    assert [(pod, reason) for pod, reason, _ in events if reason in ("Preempted", "Preempting")] in (
        [("lower-pod", "Preempted"), ("urgent", "Preempting")], [("urgent", "Preempting"), ("lower-pod", "Preempted")])
    by_kube = [e for e in kube.core.list_namespaced_event(kube.namespace).items
               if e.reason == "Preempted" and (e.source is None or e.source.component != "meshfit")]
    assert not by_kube, [(e.involved_object.name, e.message) for e in by_kube]  # kube-scheduler preempted nothing
    assert stack.meshfit.alive()
