"""meshfit preempts for lone GPU pods of its profile (kube-scheduler's DefaultPreemption off in the shipped profile):
whole lower-priority holders evicted, the freed GPUs held for the pod and the pod nominated there, and nothing for
equal priorities, `preemptionPolicy: Never`, other profiles or pods that fit."""

from __future__ import annotations

from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.lifecycle.lone_preemption import HOLD_SECONDS, REEVICT_SECONDS, WAIT_SECONDS, lone_hold_key
from tests.service.helpers import filter_nodes, make_nodes, make_pod, make_service
from tests.service.test_preemption_flow import evicted, running


def lone(name: str, priority: int, gpus: int = 8, scheduler: str = "meshfit", node: str | None = None, **spec) -> dict:
    """A GPU pod outside any gang, of `scheduler`'s profile."""
    pod = make_pod(name, gpus, node=node, phase="Running" if node else "Pending")
    pod["spec"].update(priority=priority, schedulerName=scheduler, **spec)
    return pod


def full_cluster():
    """2 racks x 4 nodes x 8 GPUs, all bound: rack 0 holds gangs low1 and low2 (priority 10), rack 1 holds lone pods
    of priority 30 on n-1-0..2 and one of priority 5 on n-1-3."""
    pods = running("low1", 2, 10, ["n-0-0", "n-0-1"]) + running("low2", 2, 10, ["n-0-2", "n-0-3"])
    pods += [lone(f"busy-{i}", 30, node=f"n-1-{i}") for i in range(3)] + [lone("cheap", 5, node="n-1-3")]
    actions = MemoryActions()
    service = make_service(make_nodes(), policy="meshfit", pods=pods, actions=actions, synchronous_actions=True)
    return service, actions


def ticks(service, seconds: float, step: float = 1.0) -> None:
    """Let `seconds` pass, one tick a step."""
    for _ in range(int(seconds / step)):
        service.clock.advance(step)
        service.scheduler.tick()


def test_a_lone_pod_evicts_the_cheapest_lower_holder_and_is_nominated_on_the_freed_node():
    service, actions = full_cluster()
    service.state.upsert_pod(lone("urgent", 20))
    service.scheduler.tick()
    assert evicted(actions) == []  # it waits WAIT_SECONDS first (a burst's room may be freeing)
    ticks(service, WAIT_SECONDS + 1)
    assert evicted(actions) == ["cheap"]  # priority 5 before the priority-10 gangs; priority 30 never
    assert [c.reason for c in actions.of("event") if c.pod.name == "cheap"] == ["Preempted"]
    [(preempting)] = [c for c in actions.of("event") if c.pod.name == "urgent"]
    assert preempting.reason == "Preempting" and "pod:default/cheap (priority 5)" in preempting.detail
    text = service.client.get("/metrics").text  # counted as a lone pod's preemption, not a gang's
    assert 'meshfit_gang_preemptions_total{preemptor="pod"} 1.0' in text
    assert 'meshfit_gang_preemptions_total{preemptor="gang"} 0.0' in text
    ticks(service, 3)
    assert evicted(actions) == ["cheap"] and not actions.of("requeue")  # no storm while the victim terminates
    service.state.delete_pod("default", "cheap")
    service.scheduler.tick()
    [requeue] = actions.of("requeue")
    assert (requeue.pod.name, requeue.detail) == ("urgent", "n-1-3")  # nominated on the freed node
    topo = service.state.topology
    assert topo.node_by_name["n-1-3"].gpus_free == 0  # held for it: no gang, no other pod takes it
    other = lone("other", 1)  # nothing of lower priority: it only waits
    service.state.upsert_pod(other)
    assert filter_nodes(service.filter(other)) == []
    assert filter_nodes(service.filter(lone("urgent", 20))) == ["n-1-3"]  # its own hold counts as its room
    nominated = lone("urgent", 20)
    nominated["status"]["nominatedNodeName"] = "n-1-3"
    service.state.upsert_pod(nominated)  # the watch shows the nomination
    ticks(service, 10)
    assert len(actions.of("requeue")) == 1
    service.state.upsert_pod(lone("urgent", 20))  # kube-scheduler cleared it after a failed attempt
    service.scheduler.tick()
    assert [(c.pod.name, c.detail) for c in actions.of("requeue")][1:] == [("urgent", "n-1-3")]  # written again
    ticks(service, 4)
    assert len(actions.of("requeue")) == 2  # at most every RENOMINATE_SECONDS
    assert service.bind(lone("urgent", 20), "n-1-3") == {"Error": ""}  # kube-scheduler's /bind: the hold is its room
    assert lone_hold_key("default", "urgent") not in topo.pods and topo.node_by_name["n-1-3"].gpus_free == 0
    service.state.upsert_pod(lone("urgent", 20, node="n-1-3"))
    service.scheduler.tick()
    assert lone_hold_key("default", "urgent") not in topo.pods and topo.node_by_name["n-1-3"].gpus_free == 0
    topo.check_invariants()


def test_a_victim_gang_is_evicted_whole_and_lost_evictions_are_sent_again():
    service, actions = full_cluster()
    service.state.delete_pod("default", "cheap")
    service.state.upsert_pod(lone("busy-3", 30, node="n-1-3"))  # rack 1 all priority 30: only the gangs are lower
    service.state.upsert_pod(lone("urgent", 20))
    ticks(service, WAIT_SECONDS + 1)
    victims = sorted(evicted(actions))
    assert victims in (["low1-0", "low1-1"], ["low2-0", "low2-1"])  # one gang, whole
    gang = "default/" + victims[0].rsplit("-", 1)[0]
    assert service.state.ledger.get(gang) is None
    ticks(service, REEVICT_SECONDS)
    assert sorted(evicted(actions)) == sorted(victims * 2)


def test_the_hold_is_given_back_when_the_pod_is_not_bound_in_time():
    service, actions = full_cluster()
    service.state.upsert_pod(lone("urgent", 20))
    ticks(service, WAIT_SECONDS + 1)
    service.state.delete_pod("default", "cheap")
    service.scheduler.tick()
    assert service.state.topology.node_by_name["n-1-3"].gpus_free == 0
    ticks(service, HOLD_SECONDS + 10, step=5.0)
    assert lone_hold_key("default", "urgent") not in service.state.topology.pods


def test_nothing_is_preempted_for_equal_priority_never_another_profile_or_a_pod_that_fits():
    service, actions = full_cluster()
    for pod in (lone("equal", 5), lone("never", 20, preemptionPolicy="Never"),
                lone("elsewhere", 20, scheduler="default-scheduler")):
        service.state.upsert_pod(pod)
    ticks(service, WAIT_SECONDS + 10)
    assert evicted(actions) == []
    service, actions = full_cluster()
    service.state.delete_pod("default", "busy-0")  # one node free
    service.state.upsert_pod(lone("fits", 20))
    ticks(service, WAIT_SECONDS + 10)
    assert evicted(actions) == []


def test_switched_off_with_preemption():
    pods = running("low1", 2, 10, ["n-0-0", "n-0-1"]) + running("low2", 2, 10, ["n-0-2", "n-0-3"])
    pods += [lone(f"busy-{i}", 5, node=f"n-1-{i}") for i in range(4)]
    actions = MemoryActions()
    service = make_service(make_nodes(), policy="meshfit", pods=pods, actions=actions, synchronous_actions=True,
                           preemption=False)
    service.state.upsert_pod(lone("urgent", 20))
    ticks(service, WAIT_SECONDS + 10)
    assert evicted(actions) == []
