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


def discovered(monkeypatch, served: dict[str, list[str]]) -> dict[tuple[str, str], str]:
    """(group, plural) -> the version discovery chooses when the API server serves `served` (path -> plurals)."""
    def fake_request(client, method, path, **kwargs):
        if path not in served:
            raise ApiStatusError(404, "NotFound", f"{path} not found")
        return json.dumps({"resources": [{"name": n} for n in served[path]]}).encode()

    monkeypatch.setattr("scheduler.kube.discovery.request_bytes", fake_request)
    return {(r.group, r.plural): r.version for r in discover(object(), DEFAULT_RESOURCES)}


def test_discovery_watches_the_version_the_cluster_serves(monkeypatch):
    found = discovered(monkeypatch, {"/apis/scheduling.k8s.io/v1alpha2": ["workloads", "podgroups"],
                                     "/apis/kueue.x-k8s.io/v1beta2": ["workloads", "topologies"]})
    assert found[("scheduling.k8s.io", "podgroups")] == "v1alpha2"
    assert found[("scheduling.k8s.io", "workloads")] == "v1alpha2"
    assert found[("kueue.x-k8s.io", "topologies")] == "v1beta2"  # Kueue 0.19 serves no v1alpha1 Topology
    assert found[("", "pods")] == "v1" and found[("kai.scheduler", "topologies")] == "v1alpha1"


def v1beta1_group(name: str, min_count: int, key: str | None = None, parent: str | None = None) -> dict:
    """A scheduling.k8s.io/v1beta1 PodGroup (1.37), optionally under a CompositePodGroup."""
    spec: dict = {"workloadRef": {"workloadName": "train", "templateName": "leaf"},
                  "schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def composite(name: str, groups: object, key: str | None = "example.com/spine") -> dict:
    """A scheduling.k8s.io/v1alpha3 CompositePodGroup needing `groups` sub-groups, in one domain of `key`."""
    spec: dict = {"workloadRef": {"workloadName": "train", "templateName": "job"},
                  "schedulingPolicy": {"gang": {"minGroupCount": groups}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def grouped(name: str, group: str, parallelism: str = "tp=8,dp=4") -> dict:
    """An index-less member pod joining PodGroup `group` (spec.schedulingGroup only, no gang label)."""
    pod = make_pod(name, annotations={"meshfit.io/parallelism": parallelism})
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def test_a_v1beta1_pod_group_member_without_an_index_is_a_gang_of_min_count_with_its_required_key():
    got = identify(grouped("w-a", "pg"), ObjectStore(v1beta1_group("pg", 4, key="example.com/leaf")))
    assert (got.gang_key, got.size, got.own_index, got.source) == ("default/pg", 4, False, "workload-api")
    assert got.placement_key == "example.com/leaf"
    assert got.constraint.required_level == "example.com/leaf"


def test_a_sub_group_of_a_composite_pod_group_joins_the_composite_gang_with_the_composites_key_required():
    store = ObjectStore(composite("job", 2), v1beta1_group("job-0", 4, "example.com/leaf", parent="job"),
                        v1beta1_group("job-1", 4, "example.com/leaf", parent="job"))
    first = identify(grouped("a", "job-0", "tp=8,dp=8"), store)
    second = identify(grouped("b", "job-1", "tp=8,dp=8"), store)
    assert first.gang_key == second.gang_key == "default/job"
    assert first.size == 8  # minGroupCount 2 sub-groups of minCount 4
    assert first.constraint.required_level == "example.com/spine"
    assert first.placement_key == "example.com/spine"
    keyless = ObjectStore(composite("job", 2, key=None), v1beta1_group("job-0", 4, "example.com/leaf", parent="job"))
    assert identify(grouped("a", "job-0", "tp=8,dp=8"), keyless).constraint.required_level == "example.com/leaf"


@pytest.mark.parametrize("groups,message", [(0, "minGroupCount must be an integer"),
                                            ("2", "minGroupCount must be an integer"),
                                            (10**6, "minGroupCount must be an integer")],
                         ids=["zero", "string", "absurd"])
def test_a_malformed_composite_is_a_one_line_error(groups, message):
    store = ObjectStore(composite("job", groups), v1beta1_group("job-0", 4, parent="job"))
    with pytest.raises(JobSpecError, match=message):
        identify(grouped("a", "job-0"), store)


def test_a_composite_not_seen_yet_is_an_error_and_a_basic_composite_leaves_its_sub_groups_alone():
    with pytest.raises(JobSpecError, match="CompositePodGroup default/job .* is not known yet"):
        identify(grouped("a", "job-0"), ObjectStore(v1beta1_group("job-0", 4, parent="job")))
    basic = composite("job", 2)
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    assert identify(grouped("a", "job-0"), ObjectStore(basic, v1beta1_group("job-0", 4, parent="job"))) is None


def test_discovery_prefers_1_37s_v1beta1_and_finds_the_composite_api(monkeypatch):
    found = discovered(monkeypatch, {"/apis/scheduling.k8s.io/v1beta1": ["workloads", "podgroups"],
                                     "/apis/scheduling.k8s.io/v1alpha3": ["compositepodgroups", "podgroups"]})
    assert found[("scheduling.k8s.io", "podgroups")] == "v1beta1"
    assert found[("scheduling.k8s.io", "workloads")] == "v1beta1"
    assert found[("scheduling.k8s.io", "compositepodgroups")] == "v1alpha3"


SPINE, LEAF = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf"


def test_composite_sub_groups_arriving_interleaved_each_take_one_index_block_and_one_leaf():
    """Two sub-groups of 2 x 8 GPUs under a CompositePodGroup (spine required), leaves of 2 nodes: each sub-group
    must fill one leaf, as kube-scheduler's group cycle will require of it, whatever order the members arrive in."""
    service = make_service(make_nodes(racks=4, nodes_per_rack=2), policy="meshfit")
    for obj in (composite("job", 2, key=SPINE), v1beta1_group("job-0", 2, LEAF, parent="job"),
                v1beta1_group("job-1", 2, LEAF, parent="job")):
        service.state.upsert_object(obj)
    pods = [grouped(name, group, "tp=8,dp=4") for name, group in
            (("a0", "job-0"), ("b0", "job-1"), ("a1", "job-0"), ("b1", "job-1"))]
    nodes = {}
    for pod in pods:  # interleaved: a plain lowest-free index would put a0 and b0 in one block
        [nodes[pod["metadata"]["name"]]] = filter_nodes(service.filter(pod))
    for pod in pods:
        assert service.bind(pod, nodes[pod["metadata"]["name"]]) == {"Error": ""}
    by_pod = {b.name: parse_assignment(b.annotations) for b in service.binder.snapshot()}
    blocks = {name: by_pod[name].pod_index // 2 for name in ("a0", "a1", "b0", "b1")}
    assert blocks["a0"] == blocks["a1"] != blocks["b0"] == blocks["b1"], blocks
    leaf = {name: service.state.topology.node_by_name[node].path[-2] for name, node in nodes.items()}
    assert leaf["a0"] == leaf["a1"] and leaf["b0"] == leaf["b1"], (nodes, leaf)
    spines = {service.state.topology.node_by_name[node].path[-3] for node in nodes.values()}
    assert len(spines) == 1, nodes
    assert {a.master_addr for a in by_pod.values()} == {nodes[next(n for n, a in by_pod.items() if a.pod_index == 0)]}
