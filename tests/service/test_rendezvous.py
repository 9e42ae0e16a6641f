"""The rendezvous invariant: every member is told the node its pod 0 is bound to or held on, never empty; once a
Binding carrying that address is sent (in flight counts) pod 0 never moves; after a rollback no member binds until
the whole gang is re-placed.  Each test reproduces a case of the held-out soak on the code before the fix."""

from __future__ import annotations

import threading


from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.binding.binder_memory import MemoryBinder

from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_service


class GatedBinder(MemoryBinder):
    """Bindings of the pods in `held` wait for `gate` (a Binding in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.held: set[str] = set()
        self.entered = threading.Event()

    def bind(self, namespace, name, uid, node, annotations) -> None:
        """Wait for the gate when `name` is held, then bind."""
        if name in self.held:
            self.entered.set()
            assert self.gate.wait(10)
        super().bind(namespace, name, uid, node, annotations)


def test_pod_0_does_not_move_while_a_peers_binding_is_in_flight():
    service = make_service(make_nodes(racks=1, nodes_per_rack=4), actions=MemoryActions(), synchronous_actions=True)
    binder = GatedBinder()
    service.scheduler.bind_verb.binder = binder  # kube-scheduler's /bind posts its Binding through `BindVerb`
    pods = [gang_pod("g", i, 2) for i in range(2)]
    [node0] = filter_nodes(service.filter(pods[0]))
    [node1] = filter_nodes(service.filter(pods[1]))
    binder.held.add("g-1")
    reply: dict = {}
    peer = threading.Thread(target=lambda: reply.update(service.bind(pods[1], node1)))
    peer.start()  # g-1's Binding, carrying master-addr=node0, is in flight
    assert binder.entered.wait(5)
    pods[0]["status"]["nominatedNodeName"] = node0  # kube-scheduler tried node0 first, its filters reject it now
    offered = [n for n in sorted(service.state.topology.node_by_name) if n not in (node0, node1)]
    moved = service.filter(pods[0], offered)
    assert filter_nodes(moved) == []  # refused: pod 0 stays where g-1 was told rank 0 runs
    binder.gate.set()
    peer.join(10)
    assert reply == {"Error": ""}
    entry = service.state.ledger.get("default/g")
    assert entry.node_of(0) == node0
    assert binder.bindings[("default", "g-1")].annotations["meshfit.io/master-addr"] == node0


def test_after_a_rollback_recreated_members_bind_only_once_the_whole_gang_is_re_placed():
    nodes = make_nodes(racks=1, nodes_per_rack=6)
    service = make_service(nodes, actions=MemoryActions(), synchronous_actions=True, completion_timeout=30)
    pods = [gang_pod("g", i, 4) for i in range(4)]
    placed = {}
    for pod in pods[1:]:  # three members bind; pod 0 never comes
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
        placed[pod["metadata"]["name"]] = node
        pod["spec"]["nodeName"], pod["status"]["phase"] = node, "Running"
        service.state.upsert_pod(pod)
    service.clock.advance(31)
    service.scheduler.tick()  # completion timeout: rolled back whole, bound members evicted
    evicted = [c.pod.name for c in service.scheduler.actions.of("evict")]
    assert sorted(evicted) == ["g-1", "g-2", "g-3"]
    for pod in pods[1:]:  # the watch reports them terminating (no kubelet has stopped them yet)
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
        pod["metadata"]["resourceVersion"] = "9"
        service.state.upsert_pod(pod)
    assert service.state.ledger.get("default/g") is None  # no ghost generation founded by the evicted pods
    recreated = [gang_pod("g", i, 4, uid=f"new-{i}") for i in range(4)]
    for pod in recreated:  # new names, as an Indexed Job's controller gives them (the old pods still exist)
        pod["metadata"]["name"] += "-b"
    for pod in recreated[1:]:  # the controller recreates the workers first; the old pods are still there
        reply = service.filter(pod)
        assert filter_nodes(reply) == [] and "rolled back" in reply["FailedNodes"][next(iter(reply["FailedNodes"]))]
    for pod in pods[1:]:
        service.state.delete_pod("default", pod["metadata"]["name"])  # the old pods are finally gone
    for pod in recreated[1:]:
        service.state.upsert_pod(pod)
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    entry = service.state.ledger.get("default/g")
    assert entry is not None and entry.node_of(0) is not None  # re-placed whole: pod 0's slot is held
    told = {service.binder.bindings[("default", p["metadata"]["name"])].annotations["meshfit.io/master-addr"]
            for p in recreated[1:]}
    assert told == {entry.node_of(0)} and "" not in told
