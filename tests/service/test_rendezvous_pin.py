"""The rendezvous holds through meshfit's own replacements: pod 0 never moves while a member it evicted still runs
with the old master-addr (`Reservation.pinned_by`)."""

from __future__ import annotations

from tests.service.helpers import filter_nodes, gang_pod, make_pod
from tests.service.test_replacement import bind_gang, evicted, node_dict, service_with


def test_pod_0_stays_on_the_rendezvous_while_a_member_evicted_by_meshfit_still_runs_with_it():
    """The 1.26 soak: pod 0 was recreated and waited for room on its rendezvous node; its only bound peer was replaced
    off a cordoned node, and pod 0 was moved at once, while the evicted peer, terminating, still ran with the old
    master-addr (two rendezvous in one gang for a second)."""
    service, actions = service_with()
    placed = bind_gang(service, "g", 2)
    service.state.delete_pod("default", "g-0")  # pod 0 deleted; its controller recreates it below
    service.binder.unbind("default", "g-0")
    service.state.upsert_pod(make_pod("filler", gpus=8, node=placed[0]))  # its rendezvous node fills up meanwhile
    node = node_dict(service, placed[1])
    node["spec"]["unschedulable"] = True
    service.state.upsert_node(node)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]  # replaced off the cordoned node; the old g-1 terminates with master-addr
    pod = gang_pod("g", 0, 2, 8, uid="uid-g-0-b")
    pod["status"]["nominatedNodeName"] = placed[0]  # meshfit nominated it there; kube-scheduler's filters reject it
    service.state.upsert_pod(pod)
    others = [n for n in sorted(service.state.topology.node_by_name) if n != placed[0]]
    reply = service.filter(pod, others)
    assert filter_nodes(reply) == [], reply  # pod 0 does not move while the old g-1 still runs
    assert "must run on node" in str(reply["FailedNodes"])
    service.state.delete_pod("default", "g-1")  # the old g-1 is gone: nobody runs with the old rendezvous now
    assert filter_nodes(service.filter(pod, others)) != []
