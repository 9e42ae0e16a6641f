"""Kueue TAS assignments (v1beta2 `prefix` / `suffix`, pod counts, rank order) and the layouts that honour them:
a hostname-level assignment pins each pod to its host, so a member offered only its own host still reserves
its whole gang (issue 20: "needs 32 GPUs; the cluster has 8 free")."""

from __future__ import annotations

import pytest

from plugins.gangs import identify
from plugins.gangs.kueue import assignment_domains, rank_domains
from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot, TopologyConstraint
from tests.builders import make_cluster
from tests.kube.gang_builders import ObjectStore, make_pod
from tests.service.helpers import filter_nodes, make_nodes, make_service

HOST = "kubernetes.io/hostname"
LEAF = "network.topology.nvidia.com/leaf"


def hosts_slice(hosts: list[str], prefix: str = "", suffix: str = "") -> dict:
    """A v1beta2 assignment at the hostname level, one pod per host, hosts given by their roots."""
    individual = {"roots": hosts, **({"prefix": prefix} if prefix else {}), **({"suffix": suffix} if suffix else {})}
    return {"levels": [HOST], "slices": [{"domainCount": len(hosts), "valuesPerLevel": [{"individual": individual}],
                                         "podCounts": {"universal": 1}}]}


ASSIGNMENTS = [
    ("prefix-suffix", hosts_slice(["1", "2"], "node-", ".gpu"), ("node-1.gpu", "node-2.gpu")),
    ("individual-counts", {"levels": ["rack", HOST], "slices": [{"domainCount": 2, "valuesPerLevel": [
        {"universal": "r1"}, {"individual": {"roots": ["a", "b"]}}], "podCounts": {"individual": [3, 1]}}]},
     ("a", "a", "a", "b")),
    ("v1beta1-counts", {"levels": ["rack"], "domains": [{"values": ["r1"], "count": 2}, {"values": ["r2"], "count": 1}]},
     ("r1", "r1", "r2")),
]


@pytest.mark.parametrize("assignment,ranks", [a[1:] for a in ASSIGNMENTS], ids=[a[0] for a in ASSIGNMENTS])
def test_rank_domains_follow_kueue_order_and_counts(assignment, ranks):
    assert rank_domains(assignment, "wl") == ranks
    assert assignment_domains(assignment, "wl") == tuple(dict.fromkeys(ranks))


def workload(name: str, assignment: dict, namespace: str = "default") -> dict:
    """A v1beta2 Workload admitted with `assignment` for podset main."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "count": 4, "topologyAssignment": assignment}]}}}


def indexed_job(name: str, pods: int, namespace: str = "default") -> dict:
    """A batch/v1 Indexed Job of `pods` pods."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace, "uid": "uid-j"},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods}}


def job_pod(job: str, index: int, wl: str, **kwargs) -> dict:
    """Pod `index` of Indexed Job `job` as Kueue releases it (workload annotation, podset label)."""
    return make_pod(f"{job}-{index}-x", labels={"batch.kubernetes.io/job-completion-index": str(index),
                                                 "kueue.x-k8s.io/podset": "main"},
                    annotations={"batch.kubernetes.io/job-completion-index": str(index), "kueue.x-k8s.io/workload": wl},
                    owner=("batch/v1", "Job", job), **kwargs)


def test_a_hostname_assignment_pins_every_pod_of_an_indexed_job():
    store = ObjectStore(workload("wl", hosts_slice(["h0", "h1", "h2", "h3"])), indexed_job("train", 4))
    member = identify(job_pod("train", 2, "wl"), store)
    assert member.gang_key == "default/train"
    assert member.constraint.pod_domains == ("h0", "h1", "h2", "h3")


def test_one_domain_above_hosts_leaves_the_layout_to_meshfit():
    one_leaf = {"levels": [LEAF], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "leaf-0"}],
                                              "podCounts": {"universal": 4}}]}
    store = ObjectStore(workload("wl", one_leaf), indexed_job("train", 4))
    member = identify(job_pod("train", 0, "wl"), store)
    assert member.constraint.assigned_domains == ("leaf-0",) and member.constraint.pod_domains == ()


def pinned_gang(domains: tuple[str, ...], gpus: int = 8) -> Gang:
    """A gang of one pod per entry of `domains`, each pinned there."""
    return Gang("default", "g", tuple(PodSlot(i, f"g-{i}", gpus) for i in range(len(domains))),
                Parallelism(tp=gpus, dp=len(domains)), constraint=TopologyConstraint(pod_domains=domains))


def test_pinned_hosts_are_kept_in_index_order():
    topo = make_cluster(nodes=8)
    hosts = tuple(n.name for n in reversed(topo.nodes[:4]))
    placement = place(pinned_gang(hosts), topo, "meshfit")
    assert placement.placed and tuple(placement.pod_nodes) == hosts
    assert [r.node for r in placement.ranks[::8]] == list(hosts)  # pod i's rank block sits on its own host


def test_a_pinned_host_without_room_says_so():
    topo = make_cluster(nodes=8)
    topo.add_pod("other/0", topo.nodes[1].name, 8)
    placement = place(pinned_gang(tuple(n.name for n in topo.nodes[:4])), topo, "meshfit")
    assert not placement.placed
    assert f"pinned to node {topo.nodes[1].name}, which has 0 free GPU(s) of the 8" in placement.reason


def test_pods_pinned_to_larger_domains_stay_inside_their_own():
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    topo = service.state.topology
    placement = place(pinned_gang(("rack-1", "rack-0", "rack-1", "rack-0")), topo, "meshfit")
    racks = [n.split("-")[1] for n in placement.pod_nodes]
    assert placement.placed and racks == ["1", "0", "1", "0"] and len(set(placement.pod_nodes)) == 4


def test_members_offered_only_their_own_host_reserve_the_whole_gang():
    """The issue's case: each pod's nodeSelector is its host, so kube-scheduler offers it one node."""
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    hosts = ["n-1-3", "n-1-1", "n-0-2", "n-1-0"]
    service.state.upsert_object(indexed_job("train", 4))
    service.state.upsert_object(workload("wl", hosts_slice(hosts)))
    pods = [job_pod("train", i, "wl") for i in range(4)]
    for pod in pods:
        service.state.upsert_pod(pod)
    for index in (2, 0, 3, 1):  # any arrival order
        reply = service.filter(pods[index], [hosts[index]])
        assert filter_nodes(reply) == [hosts[index]], reply
    entry = service.state.ledger.get("default/train")
    assert [entry.node_of(i) for i in range(4)] == hosts
