"""Elastic gangs in process: start at the largest dp that fits, wait beyond it, shrink on loss, grow on room."""

from __future__ import annotations

import json

from scheduler.service.lifecycle.actions import MemoryActions
from tests.service.helpers import filter_nodes, gang_pod, make_node, make_nodes, make_pod, make_service


def elastic_pod(index: int, size: int = 8, dp_range: str = "dp=2..8", name: str = "e",
                parallelism: str | None = None, **kwargs) -> dict:
    """Member `index` of elastic gang `name`: `size` 8-GPU pods, tp=8 x dp=size unless told otherwise."""
    pod = gang_pod(name, index, size, parallelism=parallelism or f"tp=8,dp={size}", **kwargs)
    pod["metadata"]["annotations"]["meshfit.io/elastic"] = dp_range
    return pod


def setup(nodes: int = 8, blocked: int = 4, size: int = 8, **kwargs):
    """`nodes` 8-GPU nodes in one rack, the first `blocked` full with running pods, and an elastic gang's pods."""
    actions = MemoryActions()
    service = make_service(make_nodes(racks=1, nodes_per_rack=nodes), actions=actions, synchronous_actions=True)
    blockers = [make_pod(f"b{i}", 8, node=f"n-0-{i}", phase="Running") for i in range(blocked)]
    pods = [elastic_pod(i, size, **kwargs) for i in range(size)]
    for pod in blockers + pods:
        service.state.upsert_pod(pod)
    return service, actions, blockers, pods


def schedule(service, pods: list[dict]) -> dict[str, str]:
    """Filter every pod; bind those let through; returns pod name -> node or the reason it was refused."""
    outcome = {}
    for pod in pods:
        reply = service.filter(pod)
        nodes = filter_nodes(reply)
        if nodes:
            assert service.bind(pod, nodes[0]) == {"Error": ""}
            outcome[pod["metadata"]["name"]] = nodes[0]
        else:
            outcome[pod["metadata"]["name"]] = reply.get("Error") or next(iter(reply["FailedNodes"].values()))
    return outcome


def table(service, gang: str = "e") -> dict:
    """The gang's published rank table document (once the background publisher has written what was queued)."""
    assert service.scheduler.rank_tables.wait_idle(10.0), "rank-table publisher still busy after 10 s"
    return json.loads(service.scheduler.publisher.get("default", f"meshfit-{gang}-ranks")["data"]["ranks.json"])


def row(service, gang: str = "default/e") -> dict:
    """The gang's `GET /gangs` row."""
    return next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == gang)


def bound_indices(service, gang: str = "default/e") -> list[int]:
    """Indices of the gang's pods that hold a node."""
    return sorted(r.member.index for r in service.state.gang_members(gang) if r.node)


def test_it_starts_at_the_largest_dp_that_fits_and_the_rest_wait_with_a_reason():
    service, actions, _, pods = setup()
    outcome = schedule(service, pods[::-1])  # members in any order: pod 7 arrives first and reserves dp=4
    waiting = {name: why for name, why in outcome.items() if not why.startswith("n-")}
    assert sorted(waiting) == ["e-4", "e-5", "e-6", "e-7"]
    assert waiting["e-7"] == "elastic gang default/e runs at dp=4 of 2..8; this pod (index 7) waits for room to grow"
    assert bound_indices(service) == [0, 1, 2, 3]
    service.scheduler.tick()
    assert row(service)["state"] == "bound" and row(service)["elastic"] == "dp=4 of 2..8"
    doc = table(service)
    assert doc["world_size"] == 32 and doc["parallelism"]["dp"] == 4 and len(doc["pods"]) == 4
    assert doc["elastic"] == {"min_dp": 2, "max_dp": 8, "dp": 4, "generation": 1}
    assert all(p["node"] for p in doc["pods"])
    assert service.bind(pods[5], "n-0-0")["Error"]  # a pod past the size never binds, even when asked directly


def test_it_grows_to_its_largest_size_when_room_frees_and_republishes():
    service, actions, blockers, pods = setup()
    schedule(service, pods)
    service.scheduler.tick()
    for pod in blockers:
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    requeued = {c.pod.name: c.detail for c in actions.of("requeue")}
    assert {name: requeued.get(name) for name in ("e-4", "e-5", "e-6", "e-7")} == {
        "e-4": "n-0-0", "e-5": "n-0-1", "e-6": "n-0-2", "e-7": "n-0-3"}  # the waiting pods come back to their nodes
    assert schedule(service, pods[4:]) == {"e-4": "n-0-0", "e-5": "n-0-1", "e-6": "n-0-2", "e-7": "n-0-3"}
    service.scheduler.tick()
    doc = table(service)
    assert doc["world_size"] == 64 and doc["elastic"]["dp"] == 8 and doc["elastic"]["generation"] == 2
    assert [p["node"] for p in doc["pods"]][4:] == ["n-0-0", "n-0-1", "n-0-2", "n-0-3"]
    assert row(service)["state"] == "bound" and row(service)["elastic"] == "dp=8 of 2..8"
    resized = [c for c in actions.of("event") if c.reason == "GangResized"]
    assert len(resized) == 1 and "from dp=4 to dp=8" in resized[0].detail
    assert 'meshfit_elastic_resizes_total{direction="grow"} 1.0' in service.client.get("/metrics").text


def test_it_grows_only_by_whole_replicas_that_fit():
    service, actions, blockers, pods = setup()
    schedule(service, pods)
    service.scheduler.tick()
    for pod in blockers[:3]:  # room for 3 more pods: dp 4 -> 7
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    schedule(service, pods[4:])
    service.scheduler.tick()
    assert bound_indices(service) == list(range(7)) and table(service)["elastic"]["dp"] == 7


def test_it_does_not_grow_while_a_gang_of_equal_or_higher_priority_waits():
    service, actions, blockers, pods = setup()
    schedule(service, pods)
    service.scheduler.tick()
    other = [gang_pod("big", i, 6) for i in range(6)]  # 6 nodes: does not fit in the 4 that free
    for pod in other:
        service.state.upsert_pod(pod)
    assert filter_nodes(service.filter(other[0])) == []
    assert row(service, "default/big")["state"] == "waiting"
    for pod in blockers:
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    assert bound_indices(service) == [0, 1, 2, 3] and table(service)["elastic"]["dp"] == 4
    assert not [c for c in actions.of("requeue") if c.pod.name in ("e-4", "e-5", "e-6", "e-7") and c.detail]
    for pod in other:  # the waiting gang goes away: the elastic gang takes the room
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    assert service.state.ledger.get("default/e").elastic["dp"] == 8


def test_a_lower_priority_waiting_gang_does_not_stop_it_growing():
    service, actions, blockers, pods = setup()
    for pod in pods:
        pod["spec"]["priority"] = 100
        service.state.upsert_pod(pod)
    schedule(service, pods)
    service.scheduler.tick()
    low = [gang_pod("low", i, 6) for i in range(6)]
    for pod in low:
        service.state.upsert_pod(pod)
    assert filter_nodes(service.filter(low[0])) == []
    for pod in blockers:
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    assert service.state.ledger.get("default/e").elastic["dp"] == 8


def fail_node(service, name: str) -> None:
    """Mark a node NotReady."""
    node = make_node(name)
    node["status"]["conditions"][0]["status"] = "False"
    service.state.upsert_node(node)


def full_gang(service, pods: list[dict]) -> None:
    """Nothing else on the cluster: the elastic gang runs at its largest size."""
    schedule(service, pods)
    service.scheduler.tick()
    assert bound_indices(service) == list(range(len(pods)))


def test_a_lost_member_with_no_room_shrinks_the_gang_by_the_top_replica():
    service, actions, _, pods = setup(blocked=0)
    full_gang(service, pods)
    node_of_2 = service.state.pod("default", "e-2").node
    fail_node(service, node_of_2)
    service.state.delete_pod("default", "e-2")  # the node controller deletes its pod
    service.scheduler.tick()
    entry = service.state.ledger.get("default/e")
    assert len(entry.gang.pods) == 7 and entry.elastic["dp"] == 7
    assert [c.pod.name for c in actions.of("evict")] == ["e-7"]  # exactly the dropped replica's bound pod
    assert "resized from dp=8 to dp=7" in [c for c in actions.of("event") if c.reason == "GangResized"][0].detail
    assert 'meshfit_elastic_resizes_total{direction="shrink"} 1.0' in service.client.get("/metrics").text
    node_of_7 = service.state.pod("default", "e-7").node
    evicted = elastic_pod(7, node=node_of_7, phase="Running")
    evicted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    service.state.upsert_pod(evicted)  # the watch reports the evicted pod terminating: it must not rejoin the gang
    service.scheduler.tick()
    assert len(service.state.ledger.get("default/e").gang.pods) == 7  # it waits for the pod to go, no more shrinking
    service.state.delete_pod("default", "e-7")  # the eviction lands
    service.binder.unbind("default", "e-7")
    service.binder.unbind("default", "e-2")
    service.scheduler.tick()
    assert entry.node_of(2) == node_of_7  # the lost member takes the GPUs the dropped replica freed
    recreated = elastic_pod(2, uid="uid-e-2-again")
    again7 = elastic_pod(7, uid="uid-e-7-again")
    for pod in (recreated, again7):
        service.state.upsert_pod(pod)
    outcome = schedule(service, [recreated, again7])
    assert outcome["e-2"] == node_of_7 and "runs at dp=7 of 2..8" in outcome["e-7"]
    service.scheduler.tick()
    doc = table(service)
    assert doc["world_size"] == 56 and doc["parallelism"]["dp"] == 7 and doc["elastic"]["generation"] == 2
    assert all(p["node"] for p in doc["pods"]) and node_of_2 not in [p["node"] for p in doc["pods"]]
    assert row(service)["state"] == "bound" and bound_indices(service) == list(range(7))


def test_losing_a_member_of_the_top_replica_evicts_nothing_else():
    service, actions, _, pods = setup(blocked=0)
    full_gang(service, pods)
    fail_node(service, service.state.pod("default", "e-7").node)
    service.state.delete_pod("default", "e-7")
    service.scheduler.tick()
    assert not actions.of("evict") and service.state.ledger.get("default/e").elastic["dp"] == 7
    assert row(service)["state"] == "bound"


def test_a_replica_of_two_pods_is_dropped_whole():
    pods_par = "tp=8,pp=2,dp=4"
    service, actions, _, pods = setup(blocked=0, size=8, dp_range="dp=1..4", parallelism=pods_par)
    for pod in pods:
        pod["metadata"]["annotations"]["meshfit.io/rank-order"] = "tp-cp-ep-pp-dp"
        service.state.upsert_pod(pod)
    full_gang(service, pods)
    fail_node(service, service.state.pod("default", "e-1").node)
    service.state.delete_pod("default", "e-1")
    service.scheduler.tick()
    entry = service.state.ledger.get("default/e")
    assert entry.elastic["dp"] == 3 and len(entry.gang.pods) == 6
    assert sorted(c.pod.name for c in actions.of("evict")) == ["e-6", "e-7"]


def test_below_its_minimum_the_gang_is_rolled_back_whole():
    service, actions, _, pods = setup(nodes=4, blocked=0, size=4, dp_range="dp=4..4")
    full_gang(service, pods)
    fail_node(service, service.state.pod("default", "e-1").node)
    service.state.delete_pod("default", "e-1")
    service.scheduler.tick()
    assert sorted(c.pod.name for c in actions.of("evict")) == ["e-0", "e-2", "e-3"]
    assert row(service)["state"] == "rolling-back"
    assert any("cannot shrink below dp=4" in c.detail for c in actions.of("event") if c.reason == "GangRolledBack")


def test_a_lost_member_with_room_is_re_placed_not_shrunk():
    service, actions, blockers, pods = setup(nodes=9, blocked=1)
    schedule(service, pods)
    service.scheduler.tick()
    service.state.delete_pod("default", "b0")  # a free node appears: it is where a lost member goes
    fail_node(service, service.state.pod("default", "e-3").node)
    service.state.delete_pod("default", "e-3")
    service.scheduler.tick()
    entry = service.state.ledger.get("default/e")
    assert entry.elastic["dp"] == 8 and entry.node_of(3) == "n-0-0" and not actions.of("evict")


def test_a_malformed_range_is_a_one_line_error_and_the_service_keeps_serving():
    service, actions, _, pods = setup(blocked=0)
    bad = elastic_pod(0, name="bad", dp_range="dp=9..2")
    reply = service.filter(bad)
    assert "meshfit.io/elastic" in reply["Error"] and "\n" not in reply["Error"]
    worse = elastic_pod(0, name="worse", dp_range="dp=2..16")  # more than the 8 pods it declares
    assert "declares dp=8" in service.filter(worse)["Error"]
    full_gang(service, pods)


def test_a_gang_completed_only_through_the_watch_still_gets_its_full_table():
    service, actions, _, pods = setup()
    schedule(service, pods[:3])
    [node] = filter_nodes(service.filter(pods[3]))
    service.scheduler.tick()  # pod 3 not bound yet: no table goes out for a gang that is not whole
    service.scheduler.rank_tables.wait_idle(5)
    assert service.scheduler.publisher.get("default", "meshfit-e-ranks") is None

    def failing_bind(*args):  # the Binding landed but the reply was lost: meshfit's bind call reports a failure
        raise RuntimeError("timed out")

    service.scheduler.binder.bind = failing_bind
    assert "timed out" in service.bind(pods[3], node)["Error"]
    service.state.upsert_pod(elastic_pod(3, node=node, phase="Running"))  # the watch shows it bound after all
    service.scheduler.tick()
    service.scheduler.rank_tables.wait_idle(5)
    assert [p["node"] for p in table(service)["pods"]][3] == node


def test_after_a_restart_the_gang_keeps_its_size_and_the_waiting_pods_do_not_bind():
    service, actions, blockers, pods = setup()
    schedule(service, pods)
    service.scheduler.tick()
    given = {b.name: (b.node, b.annotations) for b in service.binder.snapshot()}
    restored = []
    for pod in pods:  # what the API server holds: 4 bound (with their bind annotations), 4 pending, nominated
        name = pod["metadata"]["name"]
        if name in given:
            node, annotations = given[name]
            pod = elastic_pod(int(name.rsplit("-", 1)[1]), node=node, phase="Running")
            pod["metadata"]["annotations"].update(annotations)
        else:
            pod["status"]["nominatedNodeName"] = "n-0-0"
        restored.append(pod)
    blockers[0]["metadata"]["name"] = "gone"  # one blocker finished while meshfit was down: room for one more pod
    again = make_service(make_nodes(racks=1, nodes_per_rack=8), pods=[*blockers[1:], *restored], rebuild=True,
                         actions=MemoryActions(), synchronous_actions=True)
    again.scheduler.tick()
    entry = again.state.ledger.get("default/e")
    assert entry.given_conflict == "" and entry.elastic["dp"] in (4, 5)  # 5 only by growing into the freed node
    assert all(i < len(entry.gang.pods) for i in entry.slots)
    waiting = [p for p in restored if int(p["metadata"]["name"].rsplit("-", 1)[1]) >= len(entry.gang.pods)]
    for pod in waiting:
        reply = again.filter(pod)
        assert filter_nodes(reply) == [] and "waits for room to grow" in next(iter(reply["FailedNodes"].values()))


def test_a_grow_whose_new_members_never_bind_gives_the_room_back_without_touching_the_running_gang():
    service, actions, blockers, pods = setup()
    schedule(service, pods)
    service.scheduler.tick()
    for pod in blockers:
        service.state.delete_pod("default", pod["metadata"]["name"])
    service.scheduler.tick()
    assert service.state.ledger.get("default/e").elastic["dp"] == 8
    schedule(service, pods[4:5])  # only pod 4 binds; 5..7 never come (say, kube-scheduler's own filters refuse them)
    service.clock.advance(service.scheduler.lifecycle.completion_timeout / 2 + 1)
    service.scheduler.tick()
    entry = service.state.ledger.get("default/e")
    assert entry.elastic["dp"] == 5 and entry.status == "bound" and not actions.of("evict")
    assert service.state.topology.gpus_free == 3 * 8  # the three held slots are free again
    service.clock.advance(1.0)
    service.scheduler.tick()  # no immediate grow again: it would only stall the same way
    assert row(service)["state"] == "bound" and entry.elastic["dp"] == 5
    service.clock.advance(service.scheduler.lifecycle.completion_timeout)
    service.scheduler.tick()  # later it tries again; the running members are never evicted for it
    assert not actions.of("evict") and entry.elastic["dp"] == 8


def test_a_fixed_gang_pod_past_the_reserved_size_is_refused_not_a_server_error():
    service, actions, _, _ = setup(blocked=0, size=2)
    bound = gang_pod("f", 0, 3, node="n-0-0", phase="Running")  # found bound: the entry is rebuilt, 3 pods
    service.state.upsert_pod(bound)
    stray = gang_pod("f", 3, 4)  # claims 4 pods: index 3 does not exist in the reserved gang
    reply = service.filter(stray)
    assert filter_nodes(reply) == [] and "disagree" in (reply.get("Error") or next(iter(reply["FailedNodes"].values())))
