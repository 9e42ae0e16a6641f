"""Whole-gang preemption in process: victims evicted whole in one rack, Events, no storm, the freed room kept
for the preemptor, /preempt for gang members, and the ways it is switched off."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.lifecycle.preemption_flow import REEVICT_SECONDS
from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_pod, make_service

RACK0 = {f"n-0-{i}" for i in range(4)}


def running(name: str, size: int, priority: int, nodes: list[str]) -> list[dict]:
    """A bound gang of `size` 8-GPU pods on `nodes` with `spec.priority`."""
    pods = [gang_pod(name, i, size, node=node, phase="Running") for i, node in enumerate(nodes)]
    for pod in pods:
        pod["spec"]["priority"] = priority
    return pods


def pending(name: str, index: int, size: int, priority: int, **spec) -> dict:
    """A pending member with `spec.priority` (and any other spec fields)."""
    pod = gang_pod(name, index, size)
    pod["spec"].update(priority=priority, **spec)
    return pod


def full_cluster(**options):
    """2 racks x 4 nodes x 8 GPUs, all bound: rack 0 holds low1 and low2 (priority 10), rack 1 holds mid (20)."""
    pods = (running("low1", 2, 10, ["n-0-0", "n-0-1"]) + running("low2", 2, 10, ["n-0-2", "n-0-3"])
            + running("mid", 4, 20, [f"n-1-{i}" for i in range(4)]))
    actions = MemoryActions()
    service = make_service(make_nodes(), policy="meshfit", pods=pods, actions=actions, synchronous_actions=True,
                           **options)
    return service, actions, pods


def evicted(actions: MemoryActions) -> list[str]:
    """Names of the pods evicted so far, in order."""
    return [call.pod.name for call in actions.of("evict")]


def events(actions: MemoryActions, reason: str) -> list[tuple[str, str]]:
    """(pod, message) of the Events of one reason."""
    return [(call.pod.name, call.detail) for call in actions.of("event") if call.reason == reason]


def gone(service, names: list[str]) -> None:
    """The evicted pods are deleted (what the kubelet confirms)."""
    for name in names:
        service.state.delete_pod("default", name)


def test_a_higher_priority_gang_evicts_only_one_whole_lower_gang_in_one_rack():
    service, actions, _ = full_cluster()
    urgent = [pending("urgent", i, 2, 100) for i in range(2)]
    for pod in urgent:
        service.state.upsert_pod(pod)
    reply = service.filter(urgent[0])
    assert filter_nodes(reply) == []
    assert "preempted 1 lower-priority holder(s) in leaf rack-0" in next(iter(reply["FailedNodes"].values()))
    assert sorted(evicted(actions)) == ["low1-0", "low1-1"]  # whole, one gang, nothing of low2 or mid
    assert sorted(pod for pod, _ in events(actions, "GangPreempted")) == ["low1-0", "low1-1"]
    [(pod, message)] = events(actions, "GangPreempting")
    assert pod == "urgent-0" and "default/low1 (priority 10)" in message and "16 GPUs freed" in message
    text = service.client.get("/metrics").text
    assert 'meshfit_gang_preemptions_total{preemptor="gang"} 1.0' in text
    assert 'meshfit_preempted_gpus_total{preemptor="gang"} 16.0' in text
    assert 'meshfit_gang_preemptions_total{preemptor="pod"} 0.0' in text
    assert service.state.ledger.get("default/low1") is None and service.state.ledger.get("default/low2") is not None


def test_no_second_preemption_while_the_victims_terminate_and_lost_evictions_are_resent():
    service, actions, _ = full_cluster()
    urgent = [pending("urgent", i, 2, 100) for i in range(2)]
    for pod in urgent:
        service.state.upsert_pod(pod)
    service.filter(urgent[0])
    for _ in range(3):
        service.filter(urgent[1])
        service.filter(urgent[0])
        service.clock.advance(1.0)
        service.scheduler.tick()
    assert sorted(evicted(actions)) == ["low1-0", "low1-1"]  # no storm: still one gang
    service.clock.advance(REEVICT_SECONDS)
    service.scheduler.tick()  # the victims are still there: the evictions may have been lost, sent again
    assert sorted(evicted(actions)) == ["low1-0", "low1-0", "low1-1", "low1-1"]


def test_the_freed_room_is_kept_for_the_preemptor_and_reserved_in_the_rack():
    service, actions, _ = full_cluster()
    urgent = [pending("urgent", i, 2, 100) for i in range(2)]
    for pod in urgent:
        service.state.upsert_pod(pod)
    service.filter(urgent[0])
    gone(service, ["low1-0", "low1-1"])
    sneaky = pending("sneaky", 0, 2, 5)  # arrives while the room is free, before the next tick
    assert filter_nodes(service.filter(sneaky)) == []
    recreated = [pending("low1", i, 2, 10) for i in range(2)]  # the victim's controller recreates it
    for pod in recreated:
        pod["metadata"]["uid"] += "-2"
        service.state.upsert_pod(pod)
    assert filter_nodes(service.filter(recreated[0])) == []
    service.scheduler.tick()
    entry = service.state.ledger.get("default/urgent")
    assert entry is not None and {entry.node_of(i) for i in range(2)} <= RACK0
    assert {c.pod.name for c in actions.of("requeue")} >= {"urgent-1"}  # parked members brought back
    for pod in urgent:
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    assert service.state.ledger.get("default/urgent").status == "bound"
    assert sorted(evicted(actions)) == ["low1-0", "low1-1"]
    row = next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/urgent")
    assert "default/low1" in row["preempted"]
    service.state.topology.check_invariants()


def test_a_victim_slot_held_for_its_replacement_does_not_keep_the_room():
    service, actions, pods = full_cluster()
    urgent = [pending("urgent", i, 2, 100) for i in range(2)]
    for pod in urgent:
        service.state.upsert_pod(pod)
    service.filter(urgent[0])
    for pod in pods[:2]:  # the watch reports the victims terminating: they never found a gang generation again
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        service.state.upsert_pod(pod)
    assert service.state.ledger.get("default/low1") is None
    gone(service, ["low1-0"])  # held for its replacement on n-0-0: low1-1 is still bound
    recreated = pending("low1", 0, 2, 10)
    recreated["metadata"]["uid"] += "-2"
    service.state.upsert_pod(recreated)  # the controller recreates it, pending
    gone(service, ["low1-1"])
    held = service.state.ledger.get("default/low1")
    assert held is None or held.node_of(0) is None  # no ghost slot on n-0-0 keeps the preemptor out of rack 0
    service.scheduler.tick()
    entry = service.state.ledger.get("default/urgent")
    assert entry is not None and {entry.node_of(i) for i in range(2)} <= RACK0
    low1 = service.state.ledger.get("default/low1")
    assert low1 is None or not low1.reserved_slots()
    service.state.topology.check_invariants()


def test_equal_priority_preempts_nothing():
    service, actions, _ = full_cluster()
    peer = pending("peer", 0, 1, 10)
    assert filter_nodes(service.filter(peer)) == []
    service.scheduler.tick()
    assert evicted(actions) == [] and events(actions, "GangPreempting") == []


def test_preemption_policy_never_and_the_flag_switch_it_off():
    service, actions, _ = full_cluster()
    polite = pending("polite", 0, 1, 100, preemptionPolicy="Never")
    assert filter_nodes(service.filter(polite)) == []
    service.scheduler.tick()
    assert evicted(actions) == []
    service, actions, _ = full_cluster(preemption=False)
    assert filter_nodes(service.filter(pending("urgent", 0, 1, 100))) == []
    service.scheduler.tick()
    assert evicted(actions) == []


def test_the_queue_preempts_for_a_gang_kube_scheduler_never_offered():
    service, actions, _ = full_cluster()
    service.state.watch_is_truth = True
    service.scheduler.lifecycle.admission.scheduler_names = frozenset({""})
    for i in range(2):
        service.state.upsert_pod(pending("urgent", i, 2, 100))
    service.scheduler.tick()
    service.clock.advance(5.0)
    service.scheduler.tick()  # queued from the watch
    assert evicted(actions) == []
    service.scheduler.tick()  # larger than the free GPUs (the queue pass skips it): planned, preempts
    assert sorted(evicted(actions)) == ["low1-0", "low1-1"]


def test_preempt_verb_answers_nothing_for_a_gang_member_and_evicts_whole_gangs_itself():
    service, actions, pods = full_cluster()
    urgent = pending("urgent", 0, 1, 100)
    victim = pods[4]  # mid-0: kube-scheduler would delete only this member of a 4-pod gang
    body = {"Pod": urgent, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        "n-1-0": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}}}
    reply = service.client.post("/preempt", json=body).json()
    assert reply == {"NodeNameToMetaVictims": {}}
    assert len(evicted(actions)) == 2 and set(evicted(actions)) <= {"low1-0", "low1-1", "low2-0", "low2-1"}
    assert len({name.split("-")[0] for name in evicted(actions)}) == 1  # one whole gang, priority 10
    again = service.client.post("/preempt", json=body).json()
    assert again == {"NodeNameToMetaVictims": {}} and len(evicted(actions)) == 2


def test_preempt_verb_for_a_plain_pod_keeps_nodes_that_evict_whole_gangs_only():
    service, actions, pods = full_cluster()
    body = {"Pod": make_pod("loner", 8), "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        "n-0-0": {"Pods": [{"UID": pods[0]["metadata"]["uid"]}], "NumPDBViolations": 0},
        "n-0-1": {"Pods": [{"UID": pods[0]["metadata"]["uid"]}, {"UID": pods[1]["metadata"]["uid"]}],
                  "NumPDBViolations": 0}}}
    reply = service.client.post("/preempt", json=body).json()
    assert list(reply["NodeNameToMetaVictims"]) == ["n-0-1"] and evicted(actions) == []


def test_concurrent_preempt_calls_for_every_member_make_one_plan():
    import threading

    service, actions, pods = full_cluster()
    members = [pending("urgent", i, 4, 100) for i in range(4)]
    for pod in members:
        service.state.upsert_pod(pod)
    victims = {"n-1-0": [pods[4]["metadata"]["uid"]]}
    replies, barrier = [], threading.Barrier(len(members))

    def ask(pod: dict) -> None:
        barrier.wait()
        replies.append(service.scheduler.preempt(victims, {}, pod))

    threads = [threading.Thread(target=ask, args=(pod,)) for pod in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert replies == [{}] * 4
    assert len(events(actions, "GangPreempting")) == 1
    assert sorted(evicted(actions)) == ["low1-0", "low1-1", "low2-0", "low2-1"]  # rack 0 cleared, mid untouched


def test_a_gang_with_a_bind_in_flight_is_not_a_victim_now():
    service, actions, _ = full_cluster()
    # its second member's Binding is in flight (e.g. a recreated pod): evicting now could leave it bound alone
    service.state.ledger.get("default/low1").slots[1].state = "binding"
    assert filter_nodes(service.filter(pending("urgent", 0, 2, 100))) == []
    assert sorted(evicted(actions)) == ["low2-0", "low2-1"]


def test_serve_has_the_preemption_switch_and_rejects_a_value_for_it():
    import subprocess
    import sys

    run = [sys.executable, "-c", "from scheduler.cli import main; main()", "serve"]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--no-preemption" in shown.stdout
    bad = subprocess.run([*run, "--preemption=sometimes"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([0, 10, 20, 100])), min_size=1, max_size=8),
       st.integers(1, 6), st.sampled_from([10, 20, 100]))
def test_property_evictions_are_whole_lower_priority_gangs_and_the_preemptor_gets_the_room(gangs, size, priority):
    nodes = [f"n-{r}-{i}" for r in range(2) for i in range(4)]
    pods, layout, at = [], {}, 0
    for g, (count, prio) in enumerate(gangs):
        chosen = nodes[at:at + count]
        if not chosen:
            break
        pods += running(f"g{g}", len(chosen), prio, chosen)
        layout[f"g{g}"] = (prio, {f"g{g}-{i}" for i in range(len(chosen))})
        at += len(chosen)
    actions = MemoryActions()
    service = make_service(make_nodes(), policy="meshfit", pods=pods, actions=actions, synchronous_actions=True)
    urgent = [pending("urgent", i, size, priority) for i in range(size)]
    for pod in urgent:
        service.state.upsert_pod(pod)
    service.filter(urgent[0])
    gone_pods = set(evicted(actions))
    for name, (prio, members) in layout.items():
        assert not gone_pods & members or (members <= gone_pods and prio < priority), (name, gone_pods)
    service.state.topology.check_invariants()
    gone(service, sorted(gone_pods))
    service.scheduler.tick()
    if gone_pods:
        entry = service.state.ledger.get("default/urgent")
        assert entry is not None and not entry.missing_indices()
    for node in service.state.topology.nodes:
        assert node.gpus_used <= node.gpus_total
    service.state.topology.check_invariants()


def test_real_preempt_body_for_a_gang_member_gets_no_node_and_meshfit_evicts_one_whole_holder():
    import copy

    from tests.service.helpers import fixture

    body = fixture("preempt.nodecache-false.json")  # kube-scheduler 1.26's own body: 3 full nodes, one victim each
    victims = [pod for node in body["NodeNameToVictims"].values() for pod in node["Pods"]]
    actions = MemoryActions()
    service = make_service(fixture("filter.nodecache-false.json")["Nodes"]["items"], policy="meshfit",
                           pods=copy.deepcopy(victims), actions=actions, synchronous_actions=True)
    pod = body["Pod"]  # priority 1000000, 8 GPUs: made a 2-pod gang's member
    pod["metadata"]["labels"]["meshfit.io/gang"] = "vip"
    pod["metadata"].setdefault("annotations", {}).update({"meshfit.io/pod-index": "0", "meshfit.io/gang-size": "2"})
    response = service.client.post("/preempt", json=body)
    assert response.status_code == 200 and response.json() == {"NodeNameToMetaVictims": {}}
    assert len(evicted(actions)) == 2 and set(evicted(actions)) <= {v["metadata"]["name"] for v in victims}
    [(_, message)] = events(actions, "GangPreempting")
    assert "16 GPUs freed" in message


def test_a_gang_kube_scheduler_preempts_whole_holds_nothing_for_its_recreated_members():
    """Soak finding: an elastic 2 x 1-GPU gang alone on a node, preempted whole through /preempt by a plain pod;
    its slots were re-held on the same node as its pods went, so the preemptor found no room there."""
    nodes = make_nodes(racks=1, nodes_per_rack=1)
    service = make_service(nodes, actions=MemoryActions(), synchronous_actions=True)
    members = [gang_pod("low", i, 2, gpus=4) for i in range(2)]
    for pod in members:
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
        pod["spec"]["nodeName"], pod["status"]["phase"] = node, "Running"
        service.state.upsert_pod(pod)
    assert service.state.ledger.get("default/low").status == "bound"
    for pod in members:  # kube-scheduler deletes the victims it chose: they turn terminating, one by one
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
        pod["metadata"]["resourceVersion"] = "7"
        service.state.upsert_pod(pod)
    service.state.delete_pod("default", "low-0")
    recreated = gang_pod("low", 0, 2, gpus=4, uid="new-0")
    service.state.upsert_pod(recreated)  # its controller recreates it before the other victim is gone
    service.state.delete_pod("default", "low-1")
    service.scheduler.tick()
    entry = service.state.ledger.get("default/low")
    assert entry is None or entry.node_of(0) is None  # nothing held for it on the preemptor's node
    assert service.state.topology.node_by_name["n-0-0"].gpus_free == 8  # the room is the preemptor's
    preemptor = make_pod("urgent", 8)
    assert filter_nodes(service.filter(preemptor)) == ["n-0-0"]
    assert service.scheduler.lifecycle.machine.unexpected == []


def test_holders_below_a_priority_are_only_those_it_could_evict():
    service, _, _ = full_cluster()
    flow = service.scheduler.preemption
    every = {h.key: h.priority for h in flow.holders(exclude="")}
    assert every == {"default/low1": 10, "default/low2": 10, "default/mid": 20}
    assert {h.key for h in flow.holders(exclude="", below=20)} == {"default/low1", "default/low2"}
    assert flow.holders(exclude="", below=10) == []  # equal priority is never a victim (`plan_preemption`)
    assert {h.key for h in flow.holders(exclude="default/low1", below=21)} == {"default/low2", "default/mid"}


def test_a_gang_of_the_common_priority_builds_no_holder_when_it_does_not_fit(monkeypatch):
    service, _, _ = full_cluster()
    flow, asked = service.scheduler.preemption, []
    every = flow.holders

    def counting(exclude: str, below: int | None = None) -> list:
        found = every(exclude, below)
        asked.append(len(found))
        return found

    monkeypatch.setattr(flow, "holders", counting)  # the test watches what one refusal builds
    same = [pending("same", i, 2, 10) for i in range(2)]
    for pod in same:
        service.state.upsert_pod(pod)
    reply = service.filter(same[0])
    assert filter_nodes(reply) == [] and "does not fit" in next(iter(reply["FailedNodes"].values()))
    assert asked == [0]  # priority 10 may evict nothing here: no holder built, no plan tried
