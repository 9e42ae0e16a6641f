"""Elastic gangs on the real control plane: an elastic gang starts at the dp that fits, grows when another gang
leaves, and shrinks by whole DP replicas when a node fails with no room to replace its member.

"Whole" for an elastic gang (docs/elastic.md): its bound pods are exactly the index prefix of its current size
(a whole number of DP replicas, within its range) and every pod beyond that size is unbound.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.realk8s.cluster_builders import (
    JOB_NAME, assert_no_overcommit, create_gang, create_nodes, gang_pod_body, pending_reasons,
)
from tests.realk8s.job_gangs import rank_table
from tests.realk8s.scenario import delete_gang, meshfit_events

pytestmark = pytest.mark.realk8s

GPUS = 8
ELASTIC = "meshfit.io/elastic"


def create_elastic(kube, name: str, pods: int, dp_range: str, indexes: list[int]) -> None:
    """Create workers `indexes` of an elastic gang of `pods` 8-GPU pods (tp=8, dp=pods), as its controller would."""
    for i in indexes:
        body = gang_pod_body(kube.namespace, name, i, pods, GPUS, f"tp={GPUS},dp={pods}")
        body["metadata"]["annotations"][ELASTIC] = dp_range
        kube.core.create_namespaced_pod(kube.namespace, body)


def told_why_waiting(kube, pod: str, timeout: float = 15.0) -> str:
    """What a pending pod was told: meshfit's GangWaiting Events about it and its PodScheduled condition.

    meshfit tells a pod past its elastic gang's size why it waits when kube-scheduler asks about it; once the
    gang's reserved pods are bound (meshfit binds them itself, in ~100 ms) and the cluster is full,
    kube-scheduler's own resource filter may reject the pod first and the extender is never asked: then the
    condition says which resource is short.  Polled until either is there."""
    deadline = time.monotonic() + timeout
    while True:
        told = [m for name, reason, m in meshfit_events(kube.core, kube.namespace)
                if name == pod and reason == "GangWaiting"]
        conditions = kube.core.read_namespaced_pod(pod, kube.namespace).status.conditions or ()
        told += [c.message or "" for c in conditions if c.type == "PodScheduled" and c.status == "False"]
        if told or time.monotonic() > deadline:
            return " | ".join(told)
        time.sleep(0.5)


def pods_of(kube, name: str) -> dict[int, object]:
    """Index -> pod of gang `name` (pods being deleted left out)."""
    pods = kube.core.list_namespaced_pod(kube.namespace, label_selector=f"{JOB_NAME}={name}").items
    return {int(p.metadata.name.rsplit("-", 1)[1]): p for p in pods if p.metadata.deletion_timestamp is None}


def elastic_whole(kube, name: str, low: int, high: int) -> int | None:
    """The gang's dp when it is whole in the elastic sense (bound pods = an index prefix of dp in [low, high]
    whole 1-pod replicas, nothing beyond bound, and the rank table describing exactly those pods), else None."""
    pods = kube.core.list_namespaced_pod(kube.namespace, label_selector=f"{JOB_NAME}={name}").items
    bound = sorted(int(p.metadata.name.rsplit("-", 1)[1]) for p in pods if p.spec.node_name)
    if not bound or bound != list(range(len(bound))) or not low <= len(bound) <= high:
        return None
    table = rank_table(kube, name)
    nodes = {int(p.metadata.name.rsplit("-", 1)[1]): p.spec.node_name for p in pods if p.spec.node_name}
    if table is None or [p["node"] for p in table["pods"]] != [nodes[i] for i in bound]:
        return None
    return len(bound)


def wait_elastic_settled(kube, stack, name: str, low: int, high: int, dp: int, others: dict[str, int],
                         timeout: float = 120.0, quiet: float = 4.0) -> dict:
    """Poll until gang `name` is whole at `dp` (elastic sense) for `quiet` s with every other gang fully bound
    (`others`: name -> pods) or fully unbound, checking no GPU over-commit at every poll; returns the rank table."""
    deadline, since, last = time.monotonic() + timeout, time.monotonic(), None
    while True:
        assert_no_overcommit(kube.core)
        pods = kube.core.list_namespaced_pod(kube.namespace).items
        snapshot = frozenset((p.metadata.name, p.spec.node_name) for p in pods)
        if snapshot != last:
            last, since = snapshot, time.monotonic()
        current = elastic_whole(kube, name, low, high)
        counts = {other: sum(1 for p in pods if p.metadata.labels.get(JOB_NAME) == other and p.spec.node_name)
                  for other in others}
        whole_others = all(counts[o] in (0, size) for o, size in others.items())
        if current == dp and whole_others and time.monotonic() - since >= quiet:
            return rank_table(kube, name)
        if time.monotonic() > deadline:
            table = rank_table(kube, name) or {}
            bound = sorted((p.metadata.name, p.spec.node_name) for p in pods if p.spec.node_name)
            with urllib.request.urlopen(f"{stack.meshfit.url}/reservations", timeout=5) as response:
                held = [e for e in json.loads(response.read()) if e["gang"].endswith(f"/{name}")]
            raise AssertionError(f"{name} not whole at dp={dp} after {timeout:.0f}s (now {current}; others "
                                 f"{counts}; bound {bound}; rank table pods {table.get('pods')} "
                                 f"elastic {table.get('elastic')}; meshfit holds {held})\n"
                                 f"{pending_reasons(kube.core, kube.namespace)}\n{stack.tail_logs(40)}")
        time.sleep(0.5)


def gang_row(stack, key: str) -> dict:
    """The `GET /gangs` row of one gang."""
    with urllib.request.urlopen(f"{stack.meshfit.url}/gangs", timeout=5) as response:
        return next(r for r in json.loads(response.read())["gangs"] if r["gang"] == key)


def test_an_elastic_gang_starts_small_grows_and_shrinks_by_whole_replicas(kube, meshfit_scheduler):
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_gang(kube.core, kube.namespace, "other", pods=4, gpus_per_pod=GPUS, seed=1)
    deadline = time.monotonic() + 90
    while sum(1 for p in pods_of(kube, "other").values() if p.spec.node_name) < 4:
        assert time.monotonic() < deadline, f"other not bound\n{stack.tail_logs(30)}"
        time.sleep(0.5)

    # start: 4 nodes free -> dp=4 of 2..8; pods 4..7 wait with the reason
    create_elastic(kube, "el", 8, "dp=2..8", [7, 3, 5, 1, 0, 6, 2, 4])
    table = wait_elastic_settled(kube, stack, "el", 2, 8, 4, {"other": 4})
    assert table["world_size"] == 32 and table["parallelism"]["dp"] == 4
    assert table["elastic"] == {"min_dp": 2, "max_dp": 8, "dp": 4, "generation": 1}
    assert gang_row(stack, f"{kube.namespace}/el")["elastic"] == "dp=4 of 2..8"
    assert "runs at dp=4 of 2..8; this pod (index 6) waits for room to grow" in told_why_waiting(kube, "el-worker-6") \
        or "Insufficient nvidia.com/gpu" in told_why_waiting(kube, "el-worker-6")

    # grow: the other gang finishes -> dp=8, rank table generation 2
    delete_gang(kube.core, kube.namespace, "other")
    table = wait_elastic_settled(kube, stack, "el", 2, 8, 8, {})
    assert table["world_size"] == 64 and table["elastic"]["generation"] == 2
    before = {i: p.spec.node_name for i, p in pods_of(kube, "el").items()}

    # shrink: the node of pod 5 fails and its pod is deleted; no free node -> the top replica (pod 7) is dropped
    failed = before[5]
    kube.core.patch_node_status(failed, {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                     "reason": "KubeletNotReady"}]}})
    kube.core.delete_namespaced_pod("el-worker-5", kube.namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 90
    while {"el-worker-5", "el-worker-7"} & {p.metadata.name for p in kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"{JOB_NAME}=el").items}:  # pod 7 is evicted by meshfit, and goes
        assert time.monotonic() < deadline, f"pod 7 not evicted\n{stack.tail_logs(40)}"
        time.sleep(0.5)
    create_elastic(kube, "el", 8, "dp=2..8", [5, 7])  # the job controller recreates both
    table = wait_elastic_settled(kube, stack, "el", 2, 8, 7, {})
    after = {i: p.spec.node_name for i, p in pods_of(kube, "el").items()}
    assert table["world_size"] == 56 and table["elastic"]["dp"] == 7 and table["elastic"]["generation"] == 3
    assert after[5] == before[7] and failed not in [p["node"] for p in table["pods"]]
    assert {i: after[i] for i in range(7) if i != 5} == {i: before[i] for i in range(7) if i != 5}  # untouched
    assert after[7] is None
    resized = [m for _, reason, m in meshfit_events(kube.core, kube.namespace) if reason == "GangResized"]
    assert any("from dp=4 to dp=8" in m for m in resized) and any("from dp=8 to dp=7" in m for m in resized)
