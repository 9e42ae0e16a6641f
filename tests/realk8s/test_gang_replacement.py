"""Failure replacement on the real control plane: meshfit itself evicts the members of failed nodes, and
their recreated pods bind with the same ranks next to their peers; spares are kept from ordinary gangs and
used for replacements."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.realk8s.cluster_builders import create_gang, create_nodes, gang_pod_body, gang_status, pending_reasons
from tests.realk8s.scenario import meshfit_events, wait_settled

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="replacement relies on nomination and requeue behaviour that differs by version")]

GPUS = 8
LEAF = "network.topology.nvidia.com/leaf"
RANKS = "meshfit.io/ranks"


def create_members(kube, name: str, pods: int, indexes: list[int]) -> None:
    """Create members `indexes` of a `pods`-pod gang (as the job controller would)."""
    for i in indexes:
        kube.core.create_namespaced_pod(kube.namespace, gang_pod_body(kube.namespace, name, i, pods, GPUS,
                                                                      f"tp={GPUS},dp={pods}"))


def pods_by_name(kube) -> dict:
    """Every pod of the test namespace by name."""
    return {p.metadata.name: p for p in kube.core.list_namespaced_pod(kube.namespace).items}


def wait_for(kube, stack, what: str, predicate, timeout: float = 90.0):
    """Poll `predicate()` until it returns something truthy; fail with the logs otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached after {timeout:.0f}s\n"
                                 f"{pending_reasons(kube.core, kube.namespace)}\n{stack.tail_logs(40)}")
        time.sleep(0.5)


def bound_nodes(kube, names: list[str]) -> dict[str, str] | None:
    """pod -> node when every pod in `names` exists and is bound, else None."""
    pods = pods_by_name(kube)
    nodes = {n: pods[n].spec.node_name if n in pods and pods[n].metadata.deletion_timestamp is None else None
             for n in names}
    return nodes if all(nodes.values()) else None


def metric(stack, name: str, labels: str) -> float:
    """One sample of meshfit's /metrics."""
    with urllib.request.urlopen(f"{stack.meshfit.url}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{name}{{{labels}}} "):
                return float(line.split()[-1])
    raise AssertionError(f"{name}{{{labels}}} not exported")


def gang_row(stack, key: str) -> dict:
    """The `GET /gangs` row of one gang."""
    with urllib.request.urlopen(f"{stack.meshfit.url}/gangs", timeout=5) as response:
        return next(r for r in json.loads(response.read())["gangs"] if r["gang"] == key)


def not_ready(kube, node: str) -> None:
    """The node's (absent) kubelet stops reporting: Ready=False."""
    kube.core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                  "reason": "KubeletNotReady"}]}})


def replace_after_eviction(kube, stack, name: str, size: int, lost: list[int]) -> dict[str, str]:
    """Wait until meshfit has evicted the `lost` members and they are gone, recreate them as the job
    controller would, and wait until they are bound; returns pod -> node."""
    names = [f"{name}-worker-{i}" for i in lost]
    wait_for(kube, stack, f"eviction of {names}", lambda: not set(names) & set(pods_by_name(kube)))
    create_members(kube, name, size, lost)
    return wait_for(kube, stack, f"{names} bound again", lambda: bound_nodes(kube, names))


def test_two_not_ready_nodes_members_come_back_with_their_ranks_in_the_same_leaf(kube, meshfit_scheduler):
    create_nodes(kube.core, 40, gpus=GPUS, leaf_size=20)  # two leaves of 20 nodes
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1"])
    create_members(kube, "g", 16, list(range(16)))
    bound = wait_for(kube, stack, "gang bound", lambda: bound_nodes(kube, [f"g-worker-{i}" for i in range(16)]))
    leaf_of = {n.metadata.name: n.metadata.labels[LEAF] for n in kube.core.list_node().items}
    ranks = {name: pod.metadata.annotations[RANKS] for name, pod in pods_by_name(kube).items()}
    failed = [bound["g-worker-3"], bound["g-worker-7"]]  # not pod 0's: the rendezvous stays
    for node in failed:
        not_ready(kube, node)
    again = replace_after_eviction(kube, stack, "g", 16, [3, 7])  # meshfit evicted them itself
    assert not set(again.values()) & set(failed) and len(set(again.values())) == 2
    assert {leaf_of[n] for n in again.values()} == {leaf_of[bound["g-worker-0"]]}  # pod 0's leaf
    pods = pods_by_name(kube)
    for name in again:  # same ranks, and the launch annotations say so
        assert pods[name].metadata.annotations[RANKS] == ranks[name]
    assert pods["g-worker-0"].spec.node_name == bound["g-worker-0"]
    [message] = [m for _, reason, m in meshfit_events(kube.core, kube.namespace) if reason == "GangMembersReplaced"]
    assert "predicted step communication" in message and " before, " in message and "unknown" not in message
    row = gang_row(stack, f"{kube.namespace}/g")["replacement"]
    assert sorted(row["pods"]) == [3, 7] and row["step_comm_seconds_before"] is not None
    assert metric(stack, "meshfit_member_replacements_total", 'source="not-ready"') == 2.0
    assert wait_settled(kube, stack, quiet=3.0) == {"g": (16, 16)}


def test_spares_are_kept_from_ordinary_gangs_and_used_for_replacements(kube, meshfit_scheduler):
    create_nodes(kube.core, 40, gpus=GPUS, leaf_size=20)
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1", "--spare-fraction", "0.1"])
    spares = {"n018", "n019", "n038", "n039"}  # ceil(0.1 x 20) = 2 per leaf, highest index first
    wait_for(kube, stack, "spares held", lambda: metric(stack, "meshfit_spare_gpus", 'kind="pool"') == 32.0)
    create_members(kube, "g", 16, list(range(16)))
    create_gang(kube.core, kube.namespace, "other", pods=16, gpus_per_pod=GPUS, seed=1)
    create_gang(kube.core, kube.namespace, "filler", pods=4, gpus_per_pod=GPUS, seed=2)  # the last non-spare room
    wait_settled(kube, stack, quiet=2.0, until=lambda st: all(st.get(g, (0, 1))[0] == st.get(g, (0, 1))[1]
                                                               for g in ("g", "other", "filler")))
    create_gang(kube.core, kube.namespace, "late", pods=1, gpus_per_pod=GPUS, seed=3)
    time.sleep(4)
    pods = pods_by_name(kube)
    assert not {p.spec.node_name for p in pods.values()} & spares  # no ordinary gang on a spare node
    assert gang_status(kube.core, kube.namespace)["late"] == (0, 1)  # only spares are free: it waits
    failed = [pods["g-worker-5"].spec.node_name, pods["g-worker-9"].spec.node_name]
    for node in failed:
        not_ready(kube, node)
    again = replace_after_eviction(kube, stack, "g", 16, [5, 9])
    assert set(again.values()) <= spares, again  # the replacements took spares (nothing else was free)
    leaf_of = {n.metadata.name: n.metadata.labels[LEAF] for n in kube.core.list_node().items}
    assert {leaf_of[n] for n in again.values()} == {leaf_of[pods["g-worker-0"].spec.node_name]}
    assert metric(stack, "meshfit_spares_used_total", 'kind="pool"') == 2.0
    assert metric(stack, "meshfit_spare_gpus", 'kind="pool"') == 16.0
    status = wait_settled(kube, stack, quiet=3.0)
    assert status["g"] == (16, 16) and status["late"] == (0, 1)


def test_a_gpu_health_condition_replaces_the_member(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1", "--unhealthy-condition", "GpuXidError",
                                            "--unhealthy-label", "example.com/gpu-health=failed"])
    create_members(kube, "g", 4, list(range(4)))
    bound = wait_for(kube, stack, "gang bound", lambda: bound_nodes(kube, [f"g-worker-{i}" for i in range(4)]))
    ranks = {name: pod.metadata.annotations[RANKS] for name, pod in pods_by_name(kube).items()}
    kube.core.patch_node_status(bound["g-worker-2"], {"status": {"conditions": [
        {"type": "GpuXidError", "status": "True", "reason": "Xid79", "message": "GPU has fallen off the bus"}]}})
    kube.core.patch_node(bound["g-worker-1"], {"metadata": {"labels": {"example.com/gpu-health": "failed"}}})
    again = replace_after_eviction(kube, stack, "g", 4, [1, 2])
    assert not set(again.values()) & set(bound.values())
    assert all(pods_by_name(kube)[n].metadata.annotations[RANKS] == ranks[n] for n in again)
    assert metric(stack, "meshfit_member_replacements_total", 'source="condition"') == 1.0
    assert metric(stack, "meshfit_member_replacements_total", 'source="label"') == 1.0
    assert wait_settled(kube, stack, quiet=2.0) == {"g": (4, 4)}
