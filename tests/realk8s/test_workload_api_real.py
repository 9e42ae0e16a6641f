"""Kubernetes' own gang API on a real control plane, each version with its own objects, meshfit as extender
(issue 18 item 4, issue 27 item 2).

A control plane of its own per module (the suite's shared one runs with default gates), with the version's gates
(`tests.realk8s.workload_api`): 1.35 serves `scheduling.k8s.io/v1alpha1` (pods carry `spec.workloadRef`), 1.36
serves `v1alpha2` (a `Workload` and a `PodGroup`; pods carry `spec.schedulingGroup`), 1.37 `v1beta1` (the same
objects, the PodGroup naming its template by `workloadRef`; `v1alpha3` CompositePodGroups).  kube-scheduler's in-tree
`GangScheduling` plugin holds a group's members until `minCount` exist and binds them together after Permit;
meshfit filters and scores each member (topology, ranks, a stable index for members without one) and its
`/bind` posts the Bindings that carry the assignment.  Each test names the API version it builds and is skipped
on the versions that do not serve it, with the reason; meshfit finds the served version by discovery.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from scheduler.handoff.assignment import ANNOTATION_POD_INDEX, parse_assignment
from scheduler.kube.discovery import served_resources
from tests.realk8s.binaries import K8sInstall
from tests.realk8s.cluster_builders import LEAF_LABEL, SPINE_LABEL, create_nodes, wait_for
from tests.realk8s.conftest import _admin_client, clean_slate
from tests.realk8s.controlplane import ControlPlane, MeshfitProcess
from tests.realk8s.overcommit import assert_no_overcommit as no_overcommit
from tests.realk8s.workload_api import (
    COMPOSITE_VERSION, GROUP, api_version_for, bound_count, create_composite_gang, create_member,
    create_pod_group_gang, create_v1alpha1_workload, gated_plane_options, members, read_pod_group,
)

GPUS = 8
V1ALPHA1 = pytest.mark.k8s_versions(every=True, min="1.35", max="1.35",
                                    why="builds scheduling.k8s.io/v1alpha1 Workloads and spec.workloadRef pods")
V1BETA1 = pytest.mark.k8s_versions(every=True, min="1.37",
                                   why="builds v1beta1 PodGroups under a scheduling.k8s.io/v1alpha3 CompositePodGroup")
V1ALPHA2 = pytest.mark.k8s_versions(every=True, min="1.36",
                                    why="builds scheduling.k8s.io Workloads, PodGroups (v1alpha2 on 1.36, v1beta1 "
                                        "from 1.37) and spec.schedulingGroup pods")



@pytest.fixture(scope="module")
def gated_plane(request: pytest.FixtureRequest, k8s_install: K8sInstall) -> ControlPlane:
    """A control plane with the version's Workload API and the GangScheduling plugin on."""
    options = gated_plane_options(k8s_install)
    plane = ControlPlane(k8s_install, **options)
    request.addfinalizer(plane.stop)
    try:
        plane.start()
    except Exception as exc:  # noqa: BLE001 - show the logs
        logs = plane.tail_logs(20)
        plane.stop()
        pytest.fail(f"control plane with {options} did not start: {exc}\n{logs}", pytrace=False)
    client = _admin_client(plane)
    served = served_resources(client, GROUP, api_version_for(k8s_install))
    client.close()
    if not served or "workloads" not in served:
        pytest.fail(f"kube-apiserver {k8s_install.full} with {options} does not serve {GROUP}/"
                    f"{api_version_for(k8s_install)} workloads (served: {served})", pytrace=False)
    plane.namespaces = []
    return plane


@pytest.fixture
def wl(gated_plane: ControlPlane, request: pytest.FixtureRequest):
    """A clean namespace on the gated control plane, meshfit serve and kube-scheduler (gates on) started."""
    env = clean_slate(gated_plane)
    meshfit = MeshfitProcess(gated_plane.kubeconfig, gated_plane.logs / f"meshfit-{env.namespace}.log")

    def finish() -> None:
        gated_plane.stop_scheduler()
        meshfit.stop()
        env.api_client.close()

    request.addfinalizer(finish)
    meshfit.start()
    env.extra_logs.append(meshfit.process)
    gated_plane.start_scheduler(meshfit.url)
    env.api = api_version_for(gated_plane.install)
    return env


def make_gang(env: Any, name: str, size: int, key: str | None = LEAF_LABEL) -> None:
    """The gang object(s) of the control plane's API version (v1alpha1 takes no topology key)."""
    if env.api == "v1alpha1":
        create_v1alpha1_workload(env, name, size)
    else:
        create_pod_group_gang(env, name, size, key, env.api)


def add_members(env: Any, gang: str, pods: list[str], size: int, indexed: bool = False) -> None:
    """Member pods `pods` (named `<gang>-<suffix>`); with `indexed` each carries meshfit.io/pod-index = its suffix."""
    for suffix in pods:
        create_member(env, gang, f"{gang}-{suffix}", GPUS, f"tp={GPUS},dp={size}", env.api,
                      int(suffix) if indexed else None)


def assert_no_overcommit(env: Any) -> None:
    """No node's bound pods request more than it has, on any resource (pods read raw)."""
    no_overcommit(env.core)


def assert_none_bound_for(env: Any, gang: str, seconds: float) -> None:
    """Over `seconds`, no member of the gang is ever bound and no node is over-committed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert bound_count(env, gang)[0] == 0, f"{gang} partly bound: {bound_count(env, gang)}"
        assert_no_overcommit(env)
        time.sleep(0.5)


def wait_whole(env: Any, gang: str, size: int, timeout: float = 90) -> None:
    """Wait until every member of the gang is bound."""
    wait_for(lambda: bound_count(env, gang) == (size, size), timeout=timeout,
             message=lambda _: f"{gang} not bound whole: {bound_count(env, gang)}\n{env.tail_logs(30)}")


def assert_whole_with_ranks(env: Any, gang: str, size: int) -> dict[int, str]:
    """Every member bound and told its index, ranks and pod 0's real node as rendezvous; returns index -> node."""
    pods = members(env, gang)
    assert len(pods) == size and all(p.node_name for p in pods), bound_count(env, gang)
    assignments = {p.name: parse_assignment(p.annotations) for p in pods}
    nodes = {assignments[p.name].pod_index: p.node_name for p in pods}
    assert sorted(nodes) == list(range(size)), {p.name: p.annotations.get(ANNOTATION_POD_INDEX) for p in pods}
    assert sorted(r for a in assignments.values() for r in a.ranks) == list(range(size * GPUS))
    assert {a.master_addr for a in assignments.values()} == {nodes[0]}, (assignments, nodes)
    assert {a.world_size for a in assignments.values()} == {size * GPUS}
    assert_no_overcommit(env)
    return nodes


def leaf_of(env: Any, node: str) -> str:
    """The node's leaf label."""
    return env.core.read_node(node).metadata.labels[LEAF_LABEL]


@pytest.mark.k8s_versions(every=True, min="1.35", why="which Workload API version is served differs by version")
def test_the_control_plane_serves_the_version_meshfit_discovers(wl):
    """The served version is the one this Kubernetes version documents, and the other is not served."""
    client = wl.api_client
    assert "workloads" in (served_resources(client, GROUP, wl.api) or ())
    for other in {"v1alpha1", "v1alpha2", "v1beta1"} - {wl.api}:
        assert served_resources(client, GROUP, other) is None, other
    if wl.api != "v1alpha1":
        assert "podgroups" in served_resources(client, GROUP, wl.api)
    if wl.api == "v1beta1":
        assert "compositepodgroups" in (served_resources(client, GROUP, COMPOSITE_VERSION) or ())


@V1ALPHA1
def test_a_v1alpha1_workload_gang_binds_whole_in_one_leaf_only_once_every_member_exists(wl):
    create_nodes(wl.core, 12, gpus=GPUS, leaf_size=4)  # three leaves of 4 nodes
    make_gang(wl, "train", 4)
    add_members(wl, "train", ["3", "1", "0"], 4, indexed=True)  # one member short of minCount
    assert_none_bound_for(wl, "train", 6.0)
    add_members(wl, "train", ["2"], 4, indexed=True)
    wait_whole(wl, "train", 4)
    nodes = assert_whole_with_ranks(wl, "train", 4)
    assert {m.name: m.annotations[ANNOTATION_POD_INDEX] for m in members(wl, "train")} == \
        {f"train-{i}": str(i) for i in range(4)}  # the pods' own indexes are kept
    assert len(set(nodes.values())) == 4 and len({leaf_of(wl, n) for n in nodes.values()}) == 1, nodes


@V1ALPHA1
def test_a_v1alpha1_workload_gang_without_indexes_binds_whole_through_the_extender(wl):
    create_nodes(wl.core, 12, gpus=GPUS, leaf_size=4)
    make_gang(wl, "plain", 4)
    add_members(wl, "plain", ["d", "b", "c", "a"], 4)  # no index, no gang label: spec.workloadRef only
    wait_whole(wl, "plain", 4)
    nodes = assert_whole_with_ranks(wl, "plain", 4)
    assert len({leaf_of(wl, n) for n in nodes.values()}) == 1, nodes


@V1ALPHA1
def test_a_v1alpha1_workload_gang_that_does_not_fit_waits_whole_then_binds_whole(wl):
    create_nodes(wl.core, 3, gpus=GPUS, leaf_size=4)  # 24 GPUs: a gang of 4 x 8 does not fit
    make_gang(wl, "big", 4)
    add_members(wl, "big", ["0", "1", "2", "3"], 4, indexed=True)
    assert_none_bound_for(wl, "big", 8.0)
    create_nodes(wl.core, 1, gpus=GPUS, leaf_size=4, start=3)  # room for the whole gang in the same leaf
    wait_whole(wl, "big", 4)
    assert_whole_with_ranks(wl, "big", 4)


@V1ALPHA1
def test_two_v1alpha1_workload_gangs_racing_for_one_leaf_never_leave_either_partly_bound(wl):
    create_nodes(wl.core, 6, gpus=GPUS, leaf_size=6)  # room for one gang of 4 only
    make_gang(wl, "a", 4)
    make_gang(wl, "b", 4)
    for i in range(4):  # members of the two gangs interleaved
        add_members(wl, "a", [str(i)], 4, indexed=True)
        add_members(wl, "b", [str(3 - i)], 4, indexed=True)
    wait_for(lambda: 4 in (bound_count(wl, "a")[0], bound_count(wl, "b")[0]), timeout=60,
             message=lambda _: f"no gang bound whole: a {bound_count(wl, 'a')}, b {bound_count(wl, 'b')}")
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:  # the other one waits whole: never partly bound
        counts = sorted([bound_count(wl, "a")[0], bound_count(wl, "b")[0]])
        assert counts == [0, 4], counts
        assert_no_overcommit(wl)
        time.sleep(0.5)
    assert_whole_with_ranks(wl, "a" if bound_count(wl, "a")[0] == 4 else "b", 4)


@V1ALPHA2
def test_a_pod_group_gang_without_indexes_binds_whole_in_one_domain_of_its_key_with_ranks(wl):
    create_nodes(wl.core, 12, gpus=GPUS, leaf_size=4)  # three leaves of 4 nodes
    make_gang(wl, "pg", 4, key=LEAF_LABEL)
    stored = read_pod_group(wl, "pg", wl.api)["spec"]
    assert stored["schedulingConstraints"] == {"topology": [{"key": LEAF_LABEL}]}, stored  # the TAS gate kept it
    add_members(wl, "pg", ["d", "b", "c"], 4)  # no index, no gang label: spec.schedulingGroup only
    assert_none_bound_for(wl, "pg", 6.0)  # one member short of minCount
    add_members(wl, "pg", ["a"], 4)
    wait_whole(wl, "pg", 4)
    nodes = assert_whole_with_ranks(wl, "pg", 4)
    assert len(set(nodes.values())) == 4 and len({leaf_of(wl, n) for n in nodes.values()}) == 1, nodes


@V1ALPHA2
def test_a_pod_group_gang_that_does_not_fit_its_required_domain_waits_whole_with_a_reason(wl):
    create_nodes(wl.core, 6, gpus=GPUS, leaf_size=3)  # two leaves of 3 nodes: 48 GPUs, but 24 per leaf
    make_gang(wl, "wide", 4, key=LEAF_LABEL)
    add_members(wl, "wide", ["a", "b", "c", "d"], 4)
    assert_none_bound_for(wl, "wide", 8.0)
    reasons = wait_for(lambda: [m.waiting for m in members(wl, "wide") if m.waiting], timeout=30,
                       message=lambda _: f"no member says why it waits\n{wl.tail_logs(20)}")
    print(f"\n[workload-api] waiting reason: {reasons[0]}")
    create_nodes(wl.core, 1, gpus=GPUS, leaf_size=3, start=6)  # n006: a third leaf, alone -- still no room
    create_nodes(wl.core, 1, gpus=GPUS, labels={LEAF_LABEL: "leaf-0"}, name_prefix="x")  # leaf-0 now holds 4
    wait_whole(wl, "wide", 4)
    nodes = assert_whole_with_ranks(wl, "wide", 4)
    assert {leaf_of(wl, n) for n in nodes.values()} == {"leaf-0"}, nodes


@V1ALPHA2
def test_a_replacement_pod_group_member_gets_the_deleted_members_index_and_node(wl):
    create_nodes(wl.core, 8, gpus=GPUS, leaf_size=4)
    make_gang(wl, "rep", 4, key=LEAF_LABEL)
    add_members(wl, "rep", ["a", "b", "c", "d"], 4)
    wait_whole(wl, "rep", 4)
    before = {m.name: (parse_assignment(m.annotations), m.node_name) for m in members(wl, "rep")}
    lost, (assignment, node) = next((n, v) for n, v in before.items() if v[0].pod_index == 2)
    wl.core.delete_namespaced_pod(lost, wl.namespace, grace_period_seconds=0)
    wait_for(lambda: all(m.name != lost for m in members(wl, "rep")), timeout=30, message="member not deleted")
    add_members(wl, "rep", ["e"], 4)
    wait_whole(wl, "rep", 4)
    new = next(m for m in members(wl, "rep") if m.name == "rep-e")
    got = parse_assignment(new.annotations)
    assert (got.pod_index, got.ranks, new.node_name) == (2, assignment.ranks, node), (got, new.node_name, node)


@V1BETA1
def test_a_composite_pod_group_spanning_a_spine_binds_whole_with_each_leaf_sub_group_in_one_leaf(wl):
    """Two sub-groups of 2 x 8 GPUs under a CompositePodGroup (spine key), leaves of 2 nodes: kube-scheduler's group
    cycle needs each sub-group inside one leaf and the whole inside one spine; meshfit makes the composite one gang
    (one rank table, pod 0's node as rendezvous) whose sub-groups are its slices.  Members arrive interleaved."""
    create_nodes(wl.core, 8, gpus=GPUS, leaf_size=2)  # four leaves of 2 nodes, one spine
    groups = create_composite_gang(wl, "cj", children=2, min_count=2, spine_key=SPINE_LABEL, leaf_key=LEAF_LABEL)
    for suffix in ("0", "1"):
        for group in groups:
            create_member(wl, group, f"{group}-m{suffix}", GPUS, f"tp={GPUS},dp=4", wl.api)
    wait_for(lambda: sum(bound_count(wl, g)[0] for g in groups) == 4, timeout=90,
             message=lambda _: f"composite not bound whole: {[bound_count(wl, g) for g in groups]}\n"
                               f"{wl.tail_logs(40)}")
    pods = {g: members(wl, g) for g in groups}
    assignments = {p.name: parse_assignment(p.annotations) for g in groups for p in pods[g]}
    nodes = {p.name: p.node_name for g in groups for p in pods[g]}
    assert sorted(a.pod_index for a in assignments.values()) == [0, 1, 2, 3], assignments
    assert sorted(r for a in assignments.values() for r in a.ranks) == list(range(4 * GPUS))
    rendezvous = next(nodes[n] for n, a in assignments.items() if a.pod_index == 0)
    assert {a.master_addr for a in assignments.values()} == {rendezvous}
    for group in groups:
        assert len({leaf_of(wl, p.node_name) for p in pods[group]}) == 1, (group, nodes)
    assert len({wl.core.read_node(n).metadata.labels[SPINE_LABEL] for n in nodes.values()}) == 1, nodes
    assert_no_overcommit(wl)
