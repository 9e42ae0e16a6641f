"""Elastic gangs under random failures, repairs, departures and arrivals: every settled point is whole."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.service.lifecycle.actions import MemoryActions
from tests.service.helpers import filter_nodes, make_node, make_nodes, make_pod, make_service
from tests.service.test_elastic_gangs import elastic_pod
from tests.sizes import examples

NODES = 8
STEPS = st.lists(st.tuples(st.sampled_from(["fail", "repair", "free", "block", "tick"]), st.integers(0, NODES - 1)),
                 max_size=14)


def settle(service, actions, uids: dict[int, int], handled: set) -> None:
    """Play the cluster: evictions land, the controller recreates missing pods, pending pods are scheduled."""
    for _ in range(4):
        for call in actions.of("evict"):
            if id(call) not in handled:
                handled.add(id(call))
                service.state.delete_pod("default", call.pod.name)
                service.binder.unbind("default", call.pod.name)
        known = {r.member.index for r in service.state.gang_members("default/e")}
        for i in range(8):
            if i not in known:  # the job controller recreates it, under a new uid
                uids[i] += 1
                service.state.upsert_pod(elastic_pod(i, uid=f"e-{i}-{uids[i]}"))
        service.clock.advance(1.0)
        service.scheduler.tick()
        for record in sorted(service.state.gang_members("default/e"), key=lambda r: r.member.index):
            if record.node:
                continue
            pod = elastic_pod(record.member.index, uid=record.uid)
            nodes = filter_nodes(service.filter(pod))
            if nodes:
                assert service.bind(pod, nodes[0]) == {"Error": ""}


def check_whole(service) -> None:
    """The elastic guarantee at a settled point, and no GPU double-booked."""
    topo = service.state.topology
    assert all(node.gpus_free >= 0 for node in topo.nodes)
    entry = service.state.ledger.get("default/e")
    bound = sorted(r.member.index for r in service.state.gang_members("default/e") if r.node)
    if entry is None:
        assert bound == []
        return
    size = len(entry.gang.pods)
    assert 2 <= entry.elastic["dp"] == size <= 8 and all(i < size for i in entry.slots)
    if entry.status == "bound":
        assert bound == list(range(size))  # exactly the prefix of its size; nothing beyond it bound


@settings(max_examples=examples(40, quick=12), deadline=None)
@given(steps=STEPS)
def test_every_settled_point_is_whole(steps):
    actions = MemoryActions()
    service = make_service(make_nodes(racks=1, nodes_per_rack=NODES), actions=actions, synchronous_actions=True)
    blockers: dict[int, dict] = {}
    for i in range(3):
        blockers[i] = make_pod(f"b{i}", 8, node=f"n-0-{i}", phase="Running")
        service.state.upsert_pod(blockers[i])
    uids = {i: 0 for i in range(8)}
    handled: set = set()
    settle(service, actions, uids, handled)
    check_whole(service)
    for action, n in steps:
        name = f"n-0-{n}"
        if action in ("fail", "repair"):
            node = make_node(name)
            node["status"]["conditions"][0]["status"] = "False" if action == "fail" else "True"
            service.state.upsert_node(node)
            if action == "fail":  # the node controller deletes its pods
                for record in [r for r in service.state.pods.values() if r.node == name]:
                    service.state.delete_pod("default", record.name)
                    service.binder.unbind("default", record.name)
                    blockers.pop(int(record.name[1:]), None) if record.name.startswith("b") else None
        elif action == "free" and blockers:
            i = sorted(blockers)[n % len(blockers)]
            service.state.delete_pod("default", blockers.pop(i)["metadata"]["name"])
        elif action == "block":
            free = [node for node in service.state.topology.nodes if node.schedulable and node.gpus_free == 8]
            if free:
                blockers[100 + n] = make_pod(f"b{100 + n}", 8, node=free[0].name, phase="Running")
                service.state.upsert_pod(blockers[100 + n])
        settle(service, actions, uids, handled)
        check_whole(service)
