"""Kubernetes' own gang API as a gang source: Workload pod groups (1.35, v1alpha1) and PodGroups (1.36, v1alpha2),
the served version found by discovery, and a Workload gang placed topology-aware with ranks."""

from __future__ import annotations

import json

import pytest

from plugins.gangs import identify
from scheduler.handoff.assignment import parse_assignment
from scheduler.kube.api import ApiStatusError
from scheduler.kube.discovery import discover
from scheduler.kube.node_fit import pod_needs
from scheduler.kube.resources import DEFAULT_RESOURCES
from scheduler.placement.jobs import JobSpecError
from tests.kube.gang_builders import ObjectStore, make_pod
from tests.service.helpers import filter_nodes, make_nodes, make_service

JOB = ("batch/v1", "Job", "train")


def workload(groups: list[dict], name: str = "train-wl") -> dict:
    """A scheduling.k8s.io/v1alpha1 Workload with `groups`."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"}, "podGroups": groups}}


def member(index: int, group: str = "workers", key: str | None = None, workload_name: str = "train-wl",
           parallelism: str = "tp=8,dp=4") -> dict:
    """Pod `index` of an Indexed Job whose pods point at a Workload pod group."""
    pod = make_pod(f"train-{index}-x{index}", annotations={"batch.kubernetes.io/job-completion-index": str(index),
                                                          "meshfit.io/parallelism": parallelism},
                   labels={"batch.kubernetes.io/job-name": "train"}, owner=JOB)
    ref = {"name": workload_name, "podGroup": group, **({"podGroupReplicaKey": key} if key else {})}
    pod["spec"]["workloadRef"] = ref
    return pod


GANG = {"name": "workers", "policy": {"gang": {"minCount": 4}}}


def test_a_gang_pod_group_is_a_gang_of_min_count_pods():
    got = identify(member(2), ObjectStore(workload([GANG])))
    assert (got.gang_key, got.index, got.size, got.source) == ("default/train-wl-workers", 2, 4, "workload-api")
    assert (got.parallelism.tp, got.parallelism.dp, got.gpus_per_pod) == (8, 4, 8)


def test_replica_keys_make_independent_gangs_and_basic_groups_are_none():
    store = ObjectStore(workload([GANG, {"name": "driver", "policy": {"basic": {}}}]))
    assert identify(member(0, key="0"), store).gang_key != identify(member(0, key="1"), store).gang_key
    driver = identify(member(0, group="driver"), store)  # not a Workload gang: its Indexed Job may still be one
    assert driver is None or driver.source == "indexed-job"


@pytest.mark.parametrize("groups,message", [
    ([], "has no pod group 'workers'"),
    ([{"name": "workers", "policy": {"gang": {"minCount": 0}}}], "minCount must be an integer"),
], ids=["no-such-group", "bad-min-count"])
def test_inconsistent_workloads_are_one_line_errors(groups, message):
    with pytest.raises(JobSpecError, match=message):
        identify(member(0), ObjectStore(workload(groups)))


def test_a_workload_not_seen_yet_is_an_error_not_a_silent_single_pod():
    with pytest.raises(JobSpecError, match="is not known yet"):
        identify(member(0), ObjectStore())


def test_a_v1alpha2_pod_group_is_read_through_the_pods_scheduling_group():
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "train-workers-0", "namespace": "default"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    pod = member(3)
    del pod["spec"]["workloadRef"]
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train-workers-0"}
    got = identify(pod, ObjectStore(group))
    assert (got.gang_key, got.index, got.size) == ("default/train-workers-0", 3, 4)


def test_workload_members_are_left_to_the_in_tree_gang_plugin_to_bind():
    assert "Workload pod group" in pod_needs(member(0)).direct_bind_blocker


def test_a_workload_gang_is_placed_whole_with_ranks():
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    service.state.upsert_object(workload([GANG]))
    pods = [member(i) for i in range(4)]
    nodes = {}
    for pod in reversed(pods):  # members in any order
        [nodes[pod["metadata"]["name"]]] = filter_nodes(service.filter(pod))
    for pod in pods:
        assert service.bind(pod, nodes[pod["metadata"]["name"]]) == {"Error": ""}
    entry = service.state.ledger.get("default/train-wl-workers")
    assert entry.status == "bound" and len({entry.node_of(i) for i in range(4)}) == 4
    racks = {service.state.topology.node_by_name[entry.node_of(i)].path for i in range(4)}
    ranks = [parse_assignment(b.annotations).ranks for b in service.binder.snapshot()]
    assert sorted(r for block in ranks for r in block) == list(range(32))
    assert len({path[:-1] for path in racks}) == 1  # one leaf: the gang is kept together


def test_discovery_watches_the_version_the_cluster_serves(monkeypatch):
    served = {"/apis/scheduling.k8s.io/v1alpha2": ["workloads", "podgroups"],
              "/apis/kueue.x-k8s.io/v1beta2": ["workloads", "topologies"]}

    def fake_request(client, method, path, **kwargs):
        if path not in served:
            raise ApiStatusError(404, "NotFound", f"{path} not found")
        return json.dumps({"resources": [{"name": n} for n in served[path]]}).encode()

    monkeypatch.setattr("scheduler.kube.discovery.request_bytes", fake_request)
    found = {(r.group, r.plural): r.version for r in discover(object(), DEFAULT_RESOURCES)}
    assert found[("scheduling.k8s.io", "podgroups")] == "v1alpha2"
    assert found[("scheduling.k8s.io", "workloads")] == "v1alpha2"
    assert found[("kueue.x-k8s.io", "topologies")] == "v1beta2"  # Kueue 0.19 serves no v1alpha1 Topology
    assert found[("", "pods")] == "v1" and found[("kai.scheduler", "topologies")] == "v1alpha1"
