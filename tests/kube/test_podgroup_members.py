"""Kubernetes PodGroup gangs whose members carry no index: `v1alpha2` PodGroups (1.36: size from
`schedulingPolicy.gang.minCount`, required level from `schedulingConstraints.topology[].key`) and `v1alpha1` Workload
pod groups (1.35), with meshfit's stable index (`scheduler.gangs.stable_index`) kept for a replacement."""

from __future__ import annotations

import pytest

from plugins.gangs import identify
from scheduler.cache.state import ClusterState
from scheduler.handoff.assignment import parse_assignment
from scheduler.placement.jobs import JobSpecError
from tests.kube.gang_builders import ObjectStore, make_pod
from tests.service.helpers import filter_nodes, make_nodes, make_service

LEAF = "network.topology.nvidia.com/leaf"


def pod_group(name: str = "train", min_count: int = 4, keys: list[str] | None = None) -> dict:
    """A scheduling.k8s.io/v1alpha2 PodGroup with a gang policy and, when given, topology keys."""
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if keys is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in keys]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "1", "uid": f"uid-pg-{name}"},
            "spec": spec}


def v1alpha1_workload(name: str = "train", min_count: int = 4) -> dict:
    """A scheduling.k8s.io/v1alpha1 Workload with one gang pod group `workers`."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


def grouped(name: str, group: str = "train", **kwargs) -> dict:
    """A pod that joins PodGroup `group` by `spec.schedulingGroup` (1.36), with no index of its own."""
    pod = make_pod(name, annotations={"meshfit.io/parallelism": "tp=8"}, **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def referenced(name: str, workload: str = "train") -> dict:
    """A pod that points at a v1alpha1 Workload pod group by `spec.workloadRef` (1.35), with no index."""
    pod = make_pod(name, annotations={"meshfit.io/parallelism": "tp=8"})
    pod["spec"]["workloadRef"] = {"name": workload, "podGroup": "workers"}
    return pod


def test_a_pod_group_gang_takes_its_size_and_required_level_from_the_pod_group():
    got = identify(grouped("a"), ObjectStore(pod_group(keys=[LEAF])))
    assert (got.gang_key, got.size, got.own_index, got.source) == ("default/train", 4, False, "workload-api")
    assert got.constraint.required_level == LEAF and got.parallelism.dp == 4
    without = identify(grouped("a"), ObjectStore(pod_group()))
    assert without.constraint.required_level is None


def test_an_index_of_its_own_still_wins():
    pod = grouped("a")
    pod["metadata"]["annotations"]["meshfit.io/pod-index"] = "3"
    got = identify(pod, ObjectStore(pod_group()))
    assert (got.index, got.own_index) == (3, True)


@pytest.mark.parametrize("constraints,message", [
    ({"topology": [{"key": LEAF}, {"key": "zone"}]}, "names 2 keys"),
    ({"topology": [{"key": ""}]}, "entry without a key"),
    ({"topology": "leaf"}, "must be a list"),
], ids=["two-keys", "empty-key", "not-a-list"])
def test_malformed_topology_constraints_are_one_line_errors(constraints, message):
    group = pod_group()
    group["spec"]["schedulingConstraints"] = constraints
    with pytest.raises(JobSpecError, match=message):
        identify(grouped("a"), ObjectStore(group))


def test_a_required_key_that_contradicts_the_pods_own_required_level_is_an_error():
    pod = grouped("a")
    pod["metadata"]["annotations"]["meshfit.io/required-level"] = "network.topology.nvidia.com/spine"
    with pytest.raises(JobSpecError, match="conflicting required topology levels"):
        identify(pod, ObjectStore(pod_group(keys=[LEAF])))


def state_with(*objects: dict) -> ClusterState:
    """A cluster state over 2 racks x 4 nodes holding `objects`."""
    state = ClusterState()
    state.replace_all(make_nodes(), [], list(objects))
    return state


def indexes(state: ClusterState) -> dict[str, int]:
    """Pod name -> index of every gang member the state knows."""
    return {r.name: r.member.index for key in list(state.gang_index) for r in state.gang_members(key)}


@pytest.mark.parametrize("gang_object,member", [(pod_group(), grouped), (v1alpha1_workload(), referenced)],
                         ids=["v1alpha2-podgroup", "v1alpha1-workload"])
def test_index_less_members_get_distinct_indexes_that_stay_when_the_pod_changes(gang_object, member):
    state = state_with(gang_object)
    pods = [member(f"w-{c}") for c in "dcba"]
    for pod in pods:
        state.upsert_pod(pod)
    got = indexes(state)
    assert sorted(got.values()) == [0, 1, 2, 3]
    pods[0]["metadata"]["resourceVersion"] = "7"  # an update: identified again, same index
    pods[0]["metadata"]["labels"]["touched"] = "yes"
    state.upsert_pod(pods[0])
    assert indexes(state) == got


def test_a_replacement_gets_the_deleted_members_index_and_a_pod_beyond_the_size_waits_for_one():
    state = state_with(pod_group())
    for c in "abcd":
        state.upsert_pod(grouped(f"w-{c}"))
    lost = indexes(state)["w-c"]
    extra = state.upsert_pod(grouped("w-e"))
    assert extra.member is None and "already has its 4 members" in extra.member_error
    state.delete_pod("default", "w-c")
    assert indexes(state)["w-e"] == lost  # the waiting pod took the freed index
    state.delete_pod("default", "w-e")
    state.upsert_pod(grouped("w-f"))
    assert indexes(state)["w-f"] == lost


def test_a_terminating_member_keeps_its_index_and_its_replacement_gets_the_same_one():
    state = state_with(pod_group())
    pods = {c: grouped(f"w-{c}") for c in "abcd"}
    for pod in pods.values():
        state.upsert_pod(pod)
    lost = indexes(state)["w-b"]
    pods["b"]["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    pods["b"]["metadata"]["resourceVersion"] = "9"
    state.upsert_pod(pods["b"])
    state.upsert_pod(grouped("w-z"))
    got = indexes(state)
    assert got["w-b"] == lost and got["w-z"] == lost


def test_a_relist_keeps_the_index_the_ledger_names_for_each_pod():
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    service.state.upsert_object(pod_group())
    pods = [grouped(f"w-{c}") for c in "abcd"]
    for pod in pods:
        service.state.upsert_pod(pod)
    for pod in pods:
        assert filter_nodes(service.filter(pod))
    before = indexes(service.state)
    service.state.replace_all(list(service.state.nodes.values()), list(reversed(pods)),
                              list(service.state.objects.values()))
    assert indexes(service.state) == before


@pytest.mark.parametrize("gang_object,member", [(pod_group(keys=[LEAF]), grouped), (v1alpha1_workload(), referenced)],
                         ids=["v1alpha2-podgroup", "v1alpha1-workload"])
def test_an_index_less_gang_binds_whole_in_one_leaf_with_its_index_written_beside_its_ranks(gang_object, member):
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    service.state.upsert_object(gang_object)
    pods = [member(f"w-{c}") for c in "abcd"]
    for pod in pods:
        service.state.upsert_pod(pod)
    nodes = {}
    for pod in pods:
        [nodes[pod["metadata"]["name"]]] = filter_nodes(service.filter(pod))
    for pod in pods:
        assert service.bind(pod, nodes[pod["metadata"]["name"]]) == {"Error": ""}
    assigned = {b.name: parse_assignment(b.annotations) for b in service.binder.snapshot()}
    assert sorted(a.pod_index for a in assigned.values()) == [0, 1, 2, 3]
    assert {name: a.pod_index for name, a in assigned.items()} == indexes(service.state)
    assert sorted(r for a in assigned.values() for r in a.ranks) == list(range(32))
    first = next(name for name, a in assigned.items() if a.pod_index == 0)
    assert {a.master_addr for a in assigned.values()} == {nodes[first]}
    leaves = {service.state.topology.node_by_name[n].labels[LEAF] for n in nodes.values()}
    assert len(leaves) == 1


def test_an_offer_of_another_domain_of_the_pod_groups_key_is_one_candidate_placement_not_a_rejection():
    """kube-scheduler's 1.36 group cycle offers each member one leaf at a time: a member reserved in another leaf is
    refused there (not moved into it), and accepted when its own leaf is offered."""
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    service.state.upsert_object(pod_group(keys=[LEAF]))
    pods = [grouped(f"w-{c}") for c in "abcd"]
    for pod in pods:
        service.state.upsert_pod(pod)
    racks = {r: sorted(n for n, node in service.state.topology.node_by_name.items() if node.labels[LEAF] == r)
             for r in ("rack-0", "rack-1")}
    first = service.filter(pods[0], racks["rack-1"])  # the first offer: rack-1, before anything is reserved
    entry = service.state.ledger.get("default/train")
    reserved = {entry.node_of(i) for i in range(4)}
    home = "rack-1" if reserved <= set(racks["rack-1"]) else "rack-0"
    assert reserved <= set(racks[home]), reserved  # meshfit's own choice, one leaf
    other = "rack-0" if home == "rack-1" else "rack-1"
    names = indexes(service.state)
    for pod in pods:  # requeued members are nominated to their reserved nodes, as meshfit does
        pod["metadata"]["resourceVersion"] = "5"
        pod["status"]["nominatedNodeName"] = entry.node_of(names[pod["metadata"]["name"]])
        service.state.upsert_pod(pod)
    for pod in pods:
        refused = service.filter(pod, racks[other])
        assert not filter_nodes(refused) and "is reserved on node" in str(refused["FailedNodes"])
        assert {entry.node_of(i) for i in range(4)} == reserved  # nothing moved into the offered leaf
        [node] = filter_nodes(service.filter(pod, racks[home]))
        assert node in reserved
    assert filter_nodes(first) in ([], [entry.node_of(indexes(service.state)["w-a"])])
