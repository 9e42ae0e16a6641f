"""End to end in real mode: API double -> list+watch -> extender verbs -> Binding + annotations + rank table -> launch env.

kube-scheduler is played by the test: it offers every node to `/filter` for each pod (pods in a
random order), asks `/prioritize`, then `/bind`.  The service runs exactly as `meshfit serve
--kubeconfig` wires it (ClusterState fed by the cache, KubeBinder, KubeRankTablePublisher).
"""

from __future__ import annotations

from typing import Any

import random
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient

from scheduler.handoff.assignment import parse_assignment
from scheduler.kube import sync_once
from scheduler.kube.binder import KubeBinder
from scheduler.kube.cache import KubeCache
from scheduler.kube.configmap import KubeRankTablePublisher
from scheduler.handoff.launch import rank_environment, read_assignment
from scheduler.placement.layout import rank_to_coords
from scheduler.handoff.rank_table import RANK_TABLE_KEY, RankTable, configmap_name, parse_rank_table
from scheduler.service.app import build_scheduler, create_app
from scheduler.cache.state import ClusterState
from tests.builders import make_node
from tests.k8s_double import ApiServerDouble
from tests.kube.kube_fixtures import api_client, eventually  # noqa: F401 (api_client: fixture over `double` below)
from tests.runtime.test_launch import write_downward

JOB, NAMESPACE, GPUS = "llama", "team-a", 8
PARALLELISM = "tp=8,pp=2,dp=2"  # 4 pods x 8 GPUs: Master + 3 Workers
LEAF, SPINE = "network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine"
POD_NAMES = [f"{JOB}-master-0"] + [f"{JOB}-worker-{i}" for i in range(3)]


def cluster_nodes() -> list[dict]:
    """Three racks of two 8-GPU nodes under one spine; rack-0's first node already half used."""
    return [make_node(f"r{r}-n{i}", GPUS, {LEAF: f"rack-{r}", SPINE: "spine-0"}) for r in range(3) for i in range(2)]


def pytorchjob() -> dict:
    """The PyTorchJob object (Master 1, Worker 3) carrying the parallelism annotation."""
    template = {"metadata": {"annotations": {"meshfit.io/parallelism": PARALLELISM}},
                "spec": {"containers": [{"name": "pytorch", "image": "trainer",
                                         "resources": {"limits": {"nvidia.com/gpu": str(GPUS)}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": JOB, "namespace": NAMESPACE, "annotations": {"meshfit.io/parallelism": PARALLELISM}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 3, "template": template}}}}


def job_pod(name: str) -> dict:
    """A pending pod of the PyTorchJob as the training operator creates it."""
    role, index = ("master", 0) if "-master-" in name else ("worker", int(name.rsplit("-", 1)[1]))
    labels = {"training.kubeflow.org/job-name": JOB, "training.kubeflow.org/replica-type": role,
              "training.kubeflow.org/replica-index": str(index),
              "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels,
                         "annotations": {"meshfit.io/parallelism": PARALLELISM},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": JOB,
                                              "uid": "job-uid", "controller": True}]},
            "spec": {"schedulerName": "meshfit", "containers": [
                {"name": "pytorch", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(GPUS)},
                                                                      "requests": {"nvidia.com/gpu": str(GPUS)}}}]},
            "status": {"phase": "Pending"}}


@dataclass
class RealModeService:
    """The service as `meshfit serve --kubeconfig` wires it, against the double."""

    state: ClusterState
    cache: KubeCache
    client: TestClient
    scheduler: Any = None


def start_service(api_client) -> RealModeService:
    """Sync the state from the double, watch it, and serve the extender verbs in process."""
    state = ClusterState()
    cache = sync_once(state, api_client, watch_seconds=2).start()
    scheduler, metrics = build_scheduler(state, KubeBinder(api_client), "meshfit", KubeRankTablePublisher(api_client))
    return RealModeService(state, cache, TestClient(create_app(scheduler, metrics)), scheduler)


@pytest.fixture
def double():
    """The API double holding the cluster, the PyTorchJob and its four pending pods."""
    server = ApiServerDouble().start()
    for obj in [*cluster_nodes(), pytorchjob(), *[job_pod(name) for name in POD_NAMES]]:
        server.create(obj)
    server.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "other"},
                   "spec": {"nodeName": "r0-n0", "containers": [{"name": "c", "resources": {
                       "requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]},
                   "status": {"phase": "Running"}})
    yield server
    server.stop()


def stored_pod(double: ApiServerDouble, name: str) -> dict:
    """The pod as the API server has it now."""
    return double.store.get(double.resource_for({"apiVersion": "v1", "kind": "Pod"}), NAMESPACE, name)


def schedule(service: RealModeService, double: ApiServerDouble, name: str) -> str:
    """One kube-scheduler cycle for pod `name`: filter over every node, prioritize, bind; returns the node."""
    pod = stored_pod(double, name)
    nodes = sorted(n["metadata"]["name"] for n in cluster_nodes())
    reply = service.client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes}).json()
    assert not reply.get("Error"), reply
    [node] = reply["NodeNames"]
    scores = service.client.post("/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": nodes}).json()
    assert max(scores, key=lambda s: s["Score"]) == {"Host": node, "Score": 10}
    meta = pod["metadata"]
    bound = service.client.post("/bind", json={"PodName": name, "PodNamespace": NAMESPACE, "PodUID": meta["uid"],
                                               "Node": node}).json()
    assert bound == {"Error": ""}
    return node


def published_table(double: ApiServerDouble, service=None) -> RankTable:
    """The rank-table ConfigMap in the double (published in the background once the gang is whole), parsed strictly."""
    if service is not None:
        assert service.scheduler.rank_tables.wait_idle(10.0)
    resource = double.resource_for({"apiVersion": "v1", "kind": "ConfigMap"})
    configmap = double.store.get(resource, NAMESPACE, configmap_name(JOB))
    return parse_rank_table(configmap["data"][RANK_TABLE_KEY])


def check_launch_env(double: ApiServerDouble, table: RankTable, tmp_path: Path, check_master: bool = True) -> None:
    """Each bound pod's downward-API file gives `meshfit launch` the ranks the placement laid out."""
    for index, name in enumerate(POD_NAMES):
        pod = stored_pod(double, name)
        path = write_downward(tmp_path / f"{name}.annotations", pod["metadata"]["annotations"])
        assignment, source = read_assignment(path, None, {})
        assert (source, assignment.pod_index) == ("annotations", index)
        for local in range(GPUS):
            env = rank_environment(assignment, local)
            rank = index * GPUS + local
            row = table.rows[rank]
            assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(rank), "32", str(local))
            assert table.master_addr == table.pod_nodes[0]
            assert env["MASTER_ADDR"] == table.master_addr or not check_master
            assert row["node"] == pod["spec"]["nodeName"]
            coords = rank_to_coords(rank, assignment.parallelism, assignment.order)
            assert {axis: int(env[f"MESHFIT_{axis.upper()}_RANK"]) for axis in coords} == coords == row["coords"]


def test_gang_binds_whole_with_annotations_rank_table_and_launch_env(double, api_client, tmp_path):
    service = start_service(api_client)
    try:
        chosen = {name: schedule(service, double, name) for name in random.Random(7).sample(POD_NAMES, 4)}
        table = published_table(double, service)
    finally:
        service.cache.stop()
    assert {name: stored_pod(double, name)["spec"]["nodeName"] for name in POD_NAMES} == chosen
    assert "r0-n0" not in chosen.values() and len(set(chosen.values())) == 4
    for index, name in enumerate(POD_NAMES):
        assert parse_assignment(stored_pod(double, name)["metadata"]["annotations"]).pod_index == index
    assert table.complete and table.pod_nodes == tuple(chosen[name] for name in POD_NAMES)
    check_launch_env(double, table, tmp_path)


RESTART_ORDER = [POD_NAMES[2], POD_NAMES[3], POD_NAMES[0], POD_NAMES[1]]
"""Two workers bind before the restart; the master (pod 0, the rendezvous) only after it."""


def bind_before_the_restart(double: ApiServerDouble, api_client) -> str:
    """Bind the first half of RESTART_ORDER with a first service, stop it; returns the master address they got."""
    first = start_service(api_client)
    try:
        for name in RESTART_ORDER[:2]:
            schedule(first, double, name)
    finally:
        first.cache.stop()
    [master] = {parse_assignment(stored_pod(double, name)["metadata"]["annotations"]).master_addr
                for name in RESTART_ORDER[:2]}
    return master


def bind_across_a_restart(double: ApiServerDouble, api_client,
                          before_restart: Callable[[str], None] = lambda master: None,
                          ) -> tuple[ClusterState, dict[str, int], RankTable]:
    """Bind half the gang, call `before_restart(master address given)`, restart the service from the
    double, bind the rest: (state, GPUs used per node, table)."""
    before_restart(bind_before_the_restart(double, api_client))
    second = start_service(api_client)  # a fresh process: everything it knows comes from the double
    try:
        state = second.state
        with state.lock:
            state.topology.check_invariants()
            assert all(node.gpus_free >= 0 for node in state.topology.nodes)
            assert state.ledger.get(f"{NAMESPACE}/{JOB}").status == "partial"
        for name in RESTART_ORDER[2:]:
            schedule(second, double, name)
        assert eventually(lambda: all(r.node for r in state.gang_members(f"{NAMESPACE}/{JOB}")))
        with state.lock:
            state.topology.check_invariants()
            used = {n.name: n.gpus_total - n.gpus_free for n in state.topology.nodes}
        table = published_table(double, second)
    finally:
        second.cache.stop()
    return state, used, table


def test_restart_after_half_the_gang_bound_never_double_books(double, api_client, tmp_path):
    state, used, table = bind_across_a_restart(double, api_client)
    nodes = [stored_pod(double, name)["spec"]["nodeName"] for name in POD_NAMES]
    assert len(set(nodes)) == 4 and "r0-n0" not in nodes
    assert all(used[node] == GPUS for node in nodes) and used["r0-n0"] == 4
    assert table.complete and table.pod_nodes == tuple(nodes)
    check_launch_env(double, table, tmp_path)


def test_restart_keeps_the_master_address_the_bound_pods_were_given(double, api_client):
    given_before: list[str] = []
    _, _, table = bind_across_a_restart(double, api_client, before_restart=given_before.append)
    given = {parse_assignment(stored_pod(double, name)["metadata"]["annotations"]).master_addr for name in POD_NAMES}
    assert given == {table.master_addr} == set(given_before)
    assert stored_pod(double, POD_NAMES[0])["spec"]["nodeName"] == given_before[0]


def squatter_pod(node: str) -> dict:
    """A running non-gang pod taking all of `node`'s GPUs."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "squatter", "namespace": "other"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": str(GPUS)}, "limits": {"nvidia.com/gpu": str(GPUS)}}}]},
            "status": {"phase": "Running"}}


def test_master_node_taken_during_the_restart_refuses_the_rest_until_it_frees(double, api_client, tmp_path):
    master = bind_before_the_restart(double, api_client)
    double.create(squatter_pod(master))  # pod 0's node fills up while meshfit is down
    service = start_service(api_client)
    try:
        nodes = sorted(n["metadata"]["name"] for n in cluster_nodes())
        for name in RESTART_ORDER[2:]:  # neither the master nor its peer is reserved anywhere else
            reply = service.client.post("/filter", json={"Pod": stored_pod(double, name), "Nodes": None,
                                                         "NodeNames": nodes}).json()
            assert reply["NodeNames"] == [] and set(reply["FailedNodes"]) == set(nodes)
            assert all(f"must run on node {master}" in reason and "master-addr" in reason and "0 free GPU" in reason
                       for reason in reply["FailedNodes"].values())
        double.store.delete(double.resource_for(squatter_pod(master)), "other", "squatter")
        assert eventually(lambda: service.state.topology.node_by_name[master].gpus_free == GPUS)
        nodes_after = [schedule(service, double, name) for name in RESTART_ORDER[2:]]
        assert nodes_after[RESTART_ORDER[2:].index(POD_NAMES[0])] == master
        table = published_table(double, service)
    finally:
        service.cache.stop()
    given = {parse_assignment(stored_pod(double, name)["metadata"]["annotations"]).master_addr for name in POD_NAMES}
    assert given == {master} and table.complete and table.master_addr == master
    check_launch_env(double, table, tmp_path)


def test_a_binding_that_fails_with_500_leaves_the_pod_untouched_and_the_gang_whole(double, api_client, tmp_path):
    service = start_service(api_client)
    try:
        first = schedule(service, double, POD_NAMES[1])
        double.fail_next("POST", "/binding", 500)  # the API server fails this member's Binding
        pod = stored_pod(double, POD_NAMES[2])
        nodes = sorted(n["metadata"]["name"] for n in cluster_nodes())
        [node] = service.client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes}).json()["NodeNames"]
        reply = service.client.post("/bind", json={"PodName": POD_NAMES[2], "PodNamespace": NAMESPACE,
                                                   "PodUID": pod["metadata"]["uid"], "Node": node}).json()
        assert "HTTP 500" in reply["Error"]
        failed = stored_pod(double, POD_NAMES[2])  # nothing half-done: no node, no assignment annotations
        assert not failed["spec"].get("nodeName")
        assert not any(k.startswith("meshfit.io/ranks") for k in failed["metadata"].get("annotations", {}))
        entry = service.state.ledger.get(f"{NAMESPACE}/{JOB}")
        assert entry.slots[2].state == "reserved" and entry.node_of(2) == node  # still held for it
        rest = [POD_NAMES[0], POD_NAMES[2], POD_NAMES[3]]
        chosen = {name: schedule(service, double, name) for name in rest}  # kube-scheduler retries: no disagreement
        assert chosen[POD_NAMES[2]] == node
        table = published_table(double, service)
    finally:
        service.cache.stop()
    assert table.complete and table.pod_nodes[1] == first
    check_launch_env(double, table, tmp_path)
