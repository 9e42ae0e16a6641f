"""The gang guarantee under a genuine kube-scheduler 1.26.7 + kube-apiserver: bursts, completions, the queue.

Every scenario checks at each poll that no node is over-committed and, at every settled point,
that no gang is partly bound (see `tests.realk8s.scenario.wait_settled`).
"""

from __future__ import annotations

import pytest

from tests.realk8s.cluster_builders import create_gang, create_nodes, create_plain_pods, gang_status
from tests.realk8s.scenario import (
    burst_shapes, create_burst, delete_gang, meshfit_events, wait_settled, whole,
)

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="the binding and nomination paths through kube-scheduler differ by version")]

NODES, GPUS = 24, 8


def plain_pod_bodies(namespace: str, gpu_pods: int, cpu_pods: int) -> list[dict]:
    """Single-GPU pods and CPU-only pods (not gangs) to mix into a burst."""
    def body(name: str, gpus: int) -> dict:
        requests = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "100m"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": {"schedulerName": "meshfit", "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}}
    return [body(f"single-{i}", 1) for i in range(gpu_pods)] + [body(f"cpu-{i}", 0) for i in range(cpu_pods)]


@pytest.mark.parametrize("node_cache_capable", [False, True], ids=["nodecache-false", "nodecache-true"])
def test_a_burst_beyond_capacity_never_leaves_a_gang_partly_bound(kube, meshfit_scheduler, node_cache_capable):
    create_nodes(kube.core, NODES, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(node_cache_capable=node_cache_capable)
    shapes = burst_shapes(seed=7, capacity_gpus=NODES * GPUS)
    create_burst(kube.core, kube.namespace, shapes, seed=7, extra=plain_pod_bodies(kube.namespace, 6, 8))
    status = wait_settled(kube, stack)
    bound_gpus = sum(s.gpus_total for s in shapes if s.name in whole(status))
    assert bound_gpus >= NODES * GPUS * 0.6, (status, bound_gpus)  # the cluster is used, not left idle
    assert len(whole(status)) < len(shapes)  # demand is 1.5x: some gangs wait, whole
    # completions: finished jobs free room; meshfit's queue hands it to waiting gangs in order
    done = sorted(whole(status))[:3]
    for name in done:
        delete_gang(kube.core, kube.namespace, name)
    waiting = {s.name for s in shapes} - whole(status)
    status = wait_settled(kube, stack, until=lambda st: whole(st) & waiting)
    assert whole(status) & waiting, status


def test_a_big_gang_is_not_starved_by_a_stream_of_small_ones(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "old", pods=6, gpus_per_pod=GPUS, seed=1)
    wait_settled(kube, stack, until=lambda st: st.get("old") == (6, 6))
    create_gang(kube.core, kube.namespace, "big", pods=4, gpus_per_pod=GPUS, seed=2)
    wait_settled(kube, stack, quiet=2.0)
    for i in range(4):  # a stream of small gangs, each of which would fit on the two free nodes
        create_gang(kube.core, kube.namespace, f"small{i}", pods=1, gpus_per_pod=GPUS, seed=3 + i)
    status = wait_settled(kube, stack, quiet=3.0)
    assert status["big"] == (0, 4) and all(status[f"small{i}"] == (0, 1) for i in range(4)), status
    delete_gang(kube.core, kube.namespace, "old")
    status = wait_settled(kube, stack, timeout=60, until=lambda st: st.get("big") == (4, 4))
    assert sum(1 for i in range(4) if status[f"small{i}"] == (1, 1)) == 4, status  # 8 - 4 nodes: all fit after
    events = meshfit_events(kube.core, kube.namespace)
    assert {"GangWaiting", "GangBound"} <= {reason for _, reason, _ in events}
    big = {reason: message for _, reason, message in events if "/big:" in message}
    assert "GangBound" in big, events  # where it was reserved: in its own GangReserved Event, or (bound within 5 s)
    assert "reserved on" in big.get("GangReserved", big["GangBound"]), big  # folded into GangBound


def test_single_gpu_pods_respect_gang_reservations(kube, meshfit_scheduler):
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=4)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "g", pods=4, gpus_per_pod=GPUS, seed=5)
    create_plain_pods(kube.core, kube.namespace, "one", 6, gpus=1)
    status = wait_settled(kube, stack, quiet=3.0)
    singles = [p for p in kube.core.list_namespaced_pod(kube.namespace).items
               if p.metadata.name.startswith("one-") and p.spec.node_name]
    assert status["g"] in ((4, 4), (0, 4))
    if status["g"] == (4, 4):
        assert not singles  # all 32 GPUs are the gang's
    assert gang_status(kube.core, kube.namespace)["g"][0] in (0, 4)
