"""Gangs through failures on the real control plane: deleted members, cordoned or deleted nodes, meshfit
killed mid-burst, and the nodes kube-scheduler offers (nodeSelector, taints, CPU, sampling)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import kubernetes.watch
import pytest

from tests.realk8s.cluster_builders import (
    JOB_NAME, create_gang, create_nodes, gang_pod_body, gang_status, pending_reasons,
)
from tests.realk8s.scenario import (
    burst_shapes, create_burst, meshfit_events, wait_settled, whole,
)

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="how kube-scheduler requeues a member only the extender rejected differs by version")]

GPUS = 8


def create_members(kube, name: str, pods: int, indexes: list[int], extra_spec: dict | None = None) -> None:
    """Create only members `indexes` of a `pods`-pod gang (the others come later, or never)."""
    for i in indexes:
        kube.core.create_namespaced_pod(kube.namespace, gang_pod_body(kube.namespace, name, i, pods, GPUS,
                                                                      f"tp={GPUS},dp={pods}", extra_spec=extra_spec))


def node_of(kube, pod: str) -> str | None:
    """The node a pod is bound to, or None."""
    return kube.core.read_namespaced_pod(pod, kube.namespace).spec.node_name


def reserved_node(stack, gang_key: str, pod: str) -> str:
    """The node meshfit holds for worker `pod` (`<job>-worker-<index>`) of `gang_key` (GET /reservations)."""
    import json
    import urllib.request

    index = int(pod.rsplit("-", 1)[1])
    with urllib.request.urlopen(f"{stack.meshfit.url}/reservations", timeout=5) as response:
        for entry in json.loads(response.read()):
            if entry["gang"] == gang_key and entry["nodes"][index]:
                return entry["nodes"][index]
    raise AssertionError(f"{pod} of {gang_key} holds no node")


def wait_for_bound(kube, stack, names: list[str], timeout: float = 60.0) -> dict[str, str]:
    """Wait until every pod in `names` is bound; returns pod -> node."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = {name: node_of(kube, name) for name in names}
        if all(nodes.values()):
            return nodes
        if time.monotonic() > deadline:
            raise AssertionError(f"not bound after {timeout:.0f}s: {nodes}\n{pending_reasons(kube.core, kube.namespace)}"
                                 f"\n{stack.tail_logs(30)}")
        time.sleep(0.5)


def test_a_late_and_a_replaced_member_get_the_held_slots(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_members(kube, "g", 4, [0, 1, 2])  # member 3 is late: its slot is held, not given away
    bound = wait_for_bound(kube, stack, ["g-worker-0", "g-worker-1", "g-worker-2"])
    held = reserved_node(stack, f"{kube.namespace}/g", "g-worker-3")
    create_gang(kube.core, kube.namespace, "other", pods=5, gpus_per_pod=GPUS, seed=3)  # 8 - 4 nodes: must wait
    time.sleep(3)
    assert gang_status(kube.core, kube.namespace)["other"] == (0, 5)
    create_members(kube, "g", 4, [3])
    assert wait_for_bound(kube, stack, ["g-worker-3"])["g-worker-3"] == held
    # a bound member fails and its controller recreates it: same rank, same node
    kube.core.delete_namespaced_pod("g-worker-1", kube.namespace, grace_period_seconds=0)
    time.sleep(1)
    create_members(kube, "g", 4, [1])
    assert wait_for_bound(kube, stack, ["g-worker-1"])["g-worker-1"] == bound["g-worker-1"]
    status = wait_settled(kube, stack, quiet=3.0)
    assert status == {"g": (4, 4), "other": (0, 5)}


def test_a_held_slot_on_a_cordoned_node_moves_next_to_the_gang(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_members(kube, "g", 4, [0, 1, 2])
    wait_for_bound(kube, stack, ["g-worker-0", "g-worker-1", "g-worker-2"])
    held = reserved_node(stack, f"{kube.namespace}/g", "g-worker-3")
    kube.core.patch_node(held, {"spec": {"unschedulable": True}})
    deadline = time.monotonic() + 15
    while reserved_node(stack, f"{kube.namespace}/g", "g-worker-3") == held:
        assert time.monotonic() < deadline, "slot not moved off the cordoned node"
        time.sleep(0.5)
    create_members(kube, "g", 4, [3])
    assert wait_for_bound(kube, stack, ["g-worker-3"])["g-worker-3"] != held
    assert wait_settled(kube, stack, quiet=2.0) == {"g": (4, 4)}


def test_losing_the_rendezvous_node_rolls_the_gang_back_whole(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_members(kube, "g", 4, [1, 2, 3])  # pod 0 (rank 0, the rendezvous) not created yet
    wait_for_bound(kube, stack, ["g-worker-1", "g-worker-2", "g-worker-3"])
    rendezvous = reserved_node(stack, f"{kube.namespace}/g", "g-worker-0")
    kube.core.delete_node(rendezvous)  # the node the bound members were told to meet on is gone
    status = wait_settled(kube, stack, timeout=30, quiet=2.0)
    assert status.get("g", (0, 0))[0] == 0  # the bound members were evicted: nothing partly bound
    reasons = {reason for _, reason, _ in meshfit_events(kube.core, kube.namespace)}
    assert "GangRolledBack" in reasons
    # the job controller recreates the members: the gang is placed afresh, whole
    create_members(kube, "g", 4, [0, 1, 2, 3])
    assert wait_settled(kube, stack, quiet=2.0, until=lambda st: st.get("g") == (4, 4))["g"] == (4, 4)


def first_partly_bound_gang(kube, timeout: float) -> threading.Event:
    """An event set the moment a pod watch sees some gang with some but not all of its pods bound."""
    seen = threading.Event()

    def watch() -> None:
        members: dict[str, dict[str, bool]] = defaultdict(dict)
        stream = kubernetes.watch.Watch()
        for event in stream.stream(kube.core.list_namespaced_pod, kube.namespace, label_selector=JOB_NAME,
                                   timeout_seconds=int(timeout)):
            pod = event["object"]
            gang = members[pod.metadata.labels[JOB_NAME]]
            gang[pod.metadata.name] = bool(pod.spec.node_name)
            if 0 < sum(gang.values()) < len(gang):
                seen.set()
                stream.stop()

    threading.Thread(target=watch, daemon=True, name="partly-bound-watch").start()
    return seen


def test_meshfit_killed_mid_burst_leaves_no_gang_partly_bound(kube, meshfit_scheduler):
    nodes = 24
    create_nodes(kube.core, nodes, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(["--bind-workers", "1"])  # one binding at a time: a gang stays partly bound longer
    shapes = burst_shapes(seed=11, capacity_gpus=nodes * GPUS)
    partly_bound = first_partly_bound_gang(kube, timeout=30)
    create_burst(kube.core, kube.namespace, shapes, seed=11)
    assert partly_bound.wait(30), "no gang was ever seen partly bound"
    stack.meshfit.kill()  # SIGKILL with gangs partly bound
    at_kill = {n: s for n, s in gang_status(kube.core, kube.namespace).items() if 0 < s[0] < s[1]}
    stack.meshfit.start()
    status = wait_settled(kube, stack, timeout=120)
    assert all(status[name][0] == status[name][1] for name in at_kill), (at_kill, status)
    assert len(whole(status)) < len(shapes)


def test_placement_respects_the_nodes_kube_scheduler_offers(kube, meshfit_scheduler):
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=16, name_prefix="a", labels={"pool": "a"})
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=16, name_prefix="b", labels={"pool": "b"})
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=16, name_prefix="t",
                 taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=16, name_prefix="c", cpu="4")
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "sel", pods=4, gpus_per_pod=GPUS, seed=1,
                extra_spec={"nodeSelector": {"pool": "b"}})
    wait_settled(kube, stack, timeout=60, quiet=1.0, until=lambda st: st.get("sel") == (4, 4))
    create_gang(kube.core, kube.namespace, "cpu", pods=4, gpus_per_pod=GPUS, seed=2, cpu="32")
    status = wait_settled(kube, stack, timeout=60, until=lambda st: st.get("cpu") == (4, 4))
    pods = {p.metadata.name: p.spec.node_name for p in kube.core.list_namespaced_pod(kube.namespace).items}
    assert all(pods[f"sel-worker-{i}"].startswith("b") for i in range(4)), pods
    if status["cpu"] == (4, 4):  # 32 CPUs: never the 4-CPU nodes, never the tainted ones
        assert all(pods[f"cpu-worker-{i}"][0] == "a" for i in range(4)), pods
    assert status["cpu"] == (4, 4), status


def test_sampled_nodes_at_more_than_100_nodes(kube, meshfit_scheduler):
    nodes = 120  # percentageOfNodesToScore 10: kube-scheduler offers the extender 100 of 120 feasible nodes
    create_nodes(kube.core, nodes, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(percentage_of_nodes_to_score=10)
    for i in range(6):
        create_gang(kube.core, kube.namespace, f"s{i}", pods=8, gpus_per_pod=GPUS, seed=20 + i)
    status = wait_settled(kube, stack, timeout=90, until=lambda st: len(whole(st)) == 6)
    assert len(whole(status)) == 6, status


def test_members_on_failed_nodes_come_back_with_their_ranks_in_the_same_leaf(kube, meshfit_scheduler):
    create_nodes(kube.core, 40, gpus=GPUS, leaf_size=20)  # two leaves of 20 nodes
    stack = meshfit_scheduler()
    create_members(kube, "g", 16, list(range(16)))
    bound = wait_for_bound(kube, stack, [f"g-worker-{i}" for i in range(16)])
    leaf_of = {n.metadata.name: n.metadata.labels["network.topology.nvidia.com/leaf"]
               for n in kube.core.list_node().items}
    ranks = {p.metadata.name: p.metadata.annotations["meshfit.io/ranks"]
             for p in kube.core.list_namespaced_pod(kube.namespace).items}
    failed = [bound["g-worker-3"], bound["g-worker-7"]]  # not pod 0: the rendezvous stays
    for node in failed:  # the nodes go NotReady; their pods are deleted, as the node controller would
        kube.core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                      "reason": "KubeletNotReady"}]}})
    for name in ("g-worker-3", "g-worker-7"):
        kube.core.delete_namespaced_pod(name, kube.namespace, grace_period_seconds=0)
    time.sleep(1)
    create_members(kube, "g", 16, [3, 7])  # the job controller recreates them
    again = wait_for_bound(kube, stack, ["g-worker-3", "g-worker-7"])
    assert not set(again.values()) & set(failed)
    assert {leaf_of[n] for n in again.values()} == {leaf_of[bound["g-worker-0"]]}  # next to their peers
    for name in again:  # same ranks, and the launch annotations say so
        pod = kube.core.read_namespaced_pod(name, kube.namespace)
        assert pod.metadata.annotations["meshfit.io/ranks"] == ranks[name]
    assert wait_settled(kube, stack, quiet=2.0) == {"g": (16, 16)}
