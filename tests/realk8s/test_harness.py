"""The real-Kubernetes harness itself: control plane, Node status, and gangs scheduled through kube-scheduler."""

from __future__ import annotations

import pytest

from tests.realk8s.cluster_builders import (
    GPU, LEAF_LABEL, SPINE_LABEL, assert_no_overcommit, assert_no_partial_gangs, create_gang, create_nodes,
    gang_status, pending_reasons, wait_for,
)

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="each version's binaries must start and bind a gang")]


def test_control_plane_keeps_node_capacity(kube):
    """A Node created with GPUs keeps capacity, allocatable, Ready and its topology labels (no kubelet)."""
    assert kube.core.read_namespaced_service_account("default", kube.namespace).metadata.name == "default"
    create_nodes(kube.core, 20, gpus=8, leaf_size=4)
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    assert len(nodes) == 20
    node = nodes["n017"]
    assert node.status.capacity[GPU] == "8" and node.status.allocatable[GPU] == "8"
    assert node.status.allocatable["pods"] == "110"
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]
    assert node.metadata.labels[LEAF_LABEL] == "leaf-4" and node.metadata.labels[SPINE_LABEL] == "spine-1"
    assert not node.spec.taints  # TaintNodesByCondition is off: no not-ready taint


def _wait_gang_bound(kube, stack, name: str, size: int, timeout: float = 60.0) -> None:
    wait_for(lambda: gang_status(kube.core, kube.namespace).get(name, (0, size))[0] == size,
             timeout=timeout, interval=0.5,
             message=lambda _: f"gang {name} fully bound, status {gang_status(kube.core, kube.namespace)}",
             describe=lambda: pending_reasons(kube.core, kube.namespace) + "\n" + stack.tail_logs(25))


def test_one_gang_is_bound_through_kube_scheduler(kube, meshfit_scheduler):
    """4 pods x 8 GPUs (tp=8,dp=4) on 16 nodes x 8 GPUs: all four bound, no overcommit."""
    create_nodes(kube.core, 16, gpus=8, leaf_size=16)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "job-a", pods=4, gpus_per_pod=8, parallelism="tp=8,dp=4", seed=1)
    _wait_gang_bound(kube, stack, "job-a", 4)
    assert gang_status(kube.core, kube.namespace) == {"job-a": (4, 4)}
    assert_no_partial_gangs(kube.core, kube.namespace)
    assert_no_overcommit(kube.core)
    nodes = {p.spec.node_name for p in kube.core.list_namespaced_pod(kube.namespace).items}
    assert len(nodes) == 4


def test_pipeline_gang_without_rank_order_is_bound(kube, meshfit_scheduler):
    """12 pods x 8 GPUs (tp=8,pp=2,dp=6, no rank-order annotation) on 16 nodes: all 12 bound."""
    create_nodes(kube.core, 16, gpus=8, leaf_size=16)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "job-pp", pods=12, gpus_per_pod=8, parallelism="tp=8,pp=2,dp=6", seed=2)
    _wait_gang_bound(kube, stack, "job-pp", 12)
    assert_no_partial_gangs(kube.core, kube.namespace)
    assert_no_overcommit(kube.core)
