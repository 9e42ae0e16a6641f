"""`/guard` (issue 28): kube-scheduler asks meshfit about the pods it places in its own cycle, and never gets a node whose
room meshfit has given a gang member that its cache cannot count yet -- whatever the pod's priority."""

from __future__ import annotations

import json
import threading
import time

from scheduler.gangs.ledger import SLOT_BINDING
from tests.service.helpers import make_pod
from tests.service.test_direct_binding import bound, direct_service, watch
from tests.service.test_nomination_fence import cpu_nodes, cpu_pod, gang, reserve

ALL = ["n-0-0", "n-0-1", "n-0-2"]


def guard(service, pod: dict, nodes: list[str] = ALL) -> dict:
    """POST /guard as kube-scheduler does (nodeCacheCapable); the decoded reply."""
    reply = service.client.post("/scheduler/guard", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_node_where_meshfit_holds_a_member_is_refused_to_a_pod_of_higher_priority():
    """The member's nomination does not stop a pod of higher priority in kube-scheduler's filters; `/guard` does."""
    service = direct_service(cpu_nodes(3))
    watch(service, [cpu_pod("early")])  # keeps the member fenced: held on its node, not bound yet
    node = reserve(service, gang("g", 2))
    assert service.binder.calls == [] and service.state.pod("default", "g-1").nominated == node
    urgent = cpu_pod("urgent", priority=1000)
    reply = guard(service, urgent)
    entry = service.state.ledger.get("default/g")
    taken = {entry.node_of(0), entry.node_of(1)}  # g-0: kube-scheduler was told its node; g-1: nominated
    assert sorted(reply["NodeNames"]) == sorted(set(ALL) - taken)
    assert set(reply["FailedNodes"]) == taken
    assert "insufficient cpu" in reply["FailedNodes"][node] and "meshfit holds" in reply["FailedNodes"][node]


def test_a_higher_priority_pod_asked_about_after_the_hold_no_longer_holds_the_member():
    """Before `/guard`, a pending pod of higher priority held the member for up to 30 s (kube-scheduler could have
    placed it into the room in any cycle); once kube-scheduler asked about it after the hold, it cannot."""
    service = direct_service(cpu_nodes(3))
    watch(service, [cpu_pod("early")])
    node = reserve(service, gang("g", 2))
    urgent = cpu_pod("urgent", priority=1000)
    watch(service, [urgent])
    guard(service, urgent)  # its cycle: the member's node refused
    watch(service, [cpu_pod("early", node="n-0-2")])  # the pod from before the nomination landed elsewhere
    service.scheduler.tick()
    assert bound(service) == {"g-1": node}  # without waiting for the urgent pod to be placed


def test_a_pod_offered_the_node_before_the_hold_races_the_member_until_it_lands():
    service = direct_service(cpu_nodes(3))
    urgent = cpu_pod("urgent", priority=1000)
    watch(service, [urgent])
    assert sorted(guard(service, urgent)["NodeNames"]) == ALL  # nothing held yet: its cycle may pick any node
    node = reserve(service, gang("g", 2))
    service.clock.advance(5.0)
    service.scheduler.tick()
    assert service.binder.calls == []  # that cycle may still land it in the member's room
    entry = service.state.ledger.get("default/g")
    free = (set(ALL) - {entry.node_of(0), entry.node_of(1)}).pop()
    watch(service, [cpu_pod("urgent", priority=1000, node=free)])
    service.scheduler.tick()
    assert bound(service) == {"g-1": node}


def test_a_node_meshfit_just_bound_a_member_to_is_refused_until_kube_schedulers_cache_can_count_it():
    service = direct_service(cpu_nodes(3))
    node = reserve(service, gang("g", 2))
    assert bound(service) == {"g-1": node}  # bound by meshfit; kube-scheduler's informer may not have it yet
    assert node in guard(service, cpu_pod("after", priority=1000))["FailedNodes"]
    service.clock.advance(11.0)
    service.scheduler.tick()
    # 11 s on: still full in meshfit's own view (the member is bound there), but kube-scheduler's cache counts it now,
    # so /guard leaves the node to kube-scheduler's own filters
    assert node in guard(service, cpu_pod("later", priority=1000))["NodeNames"]


def test_a_member_bound_at_once_is_counted_by_guard_while_its_binding_is_in_flight(request):
    """No nomination is written for a member nothing races: from its reservation to kube-scheduler's informer showing
    its Binding, `/guard` is what keeps a pod kube-scheduler places out of its room."""
    service = direct_service(cpu_nodes(3), synchronous=False)
    request.addfinalizer(service.scheduler.shutdown)  # its waker and pools end with the test
    service.binder.gate = threading.Event()  # meshfit's Binding of g-1 stays in flight
    try:
        node = reserve(service, gang("g", 2))
        entry = service.state.ledger.get("default/g")
        deadline = time.monotonic() + 5
        while entry.slots[1].state != SLOT_BINDING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert entry.slots[1].state == SLOT_BINDING and service.scheduler.direct.nominator.calls == []
        reply = guard(service, cpu_pod("new"))  # created after the reservation, of the same priority
        assert node in reply["FailedNodes"] and "insufficient cpu" in reply["FailedNodes"][node]
    finally:
        service.binder.gate.set()
        service.scheduler.direct.shutdown()


def test_gang_members_and_gpu_pods_of_meshfits_profile_pass_through_to_filter():
    service = direct_service(cpu_nodes(3))
    watch(service, [cpu_pod("early")])
    pods = gang("g", 2)
    reserve(service, pods)
    assert sorted(guard(service, pods[1])["NodeNames"]) == ALL
    lone = make_pod("lone", gpus=8)
    lone["spec"]["schedulerName"] = "meshfit"
    assert sorted(guard(service, lone)["NodeNames"]) == ALL  # /filter answers for it


def test_a_pod_the_watch_has_not_shown_is_judged_by_its_body_and_nothing_is_kept():
    service = direct_service(cpu_nodes(3))
    watch(service, [cpu_pod("early")])
    node = reserve(service, gang("g", 2))
    reply = guard(service, cpu_pod("brand-new", priority=5))
    assert node in reply["FailedNodes"]
    assert service.state.pod("default", "brand-new") is None


def test_without_direct_binding_every_offered_node_passes():
    service = direct_service(cpu_nodes(3))
    service.scheduler.room_guard.direct = None  # `/guard` as answered with no direct binder
    assert sorted(guard(service, cpu_pod("p"))["NodeNames"]) == ALL


def test_a_bad_guard_body_is_a_400_with_one_line_and_the_service_keeps_serving():
    service = direct_service(cpu_nodes(3))
    for body in (b"{", b'{"Pod": 3}', b'{"Pod": {"metadata": {}}, "Nodes": null, "NodeNames": null}',
                 b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": [1, 2]}'):
        reply = service.client.post("/scheduler/guard", content=body)
        assert reply.status_code == 400, (body, reply.text)
        assert "\n" not in reply.json()["error"]
    assert sorted(guard(service, cpu_pod("p"))["NodeNames"]) == ALL


def test_a_pass_through_reply_is_the_offered_list_and_a_malformed_list_is_still_a_400():
    service = direct_service(cpu_nodes(3))
    pods = gang("g", 2)
    watch(service, pods)
    reply = service.client.post("/scheduler/guard", content=b'{"Pod": ' + json.dumps(pods[1]).encode()
                                + b', "Nodes": null, "NodeNames": ["n-0-2", "n-0-0"]}')
    assert reply.status_code == 200 and reply.json() == {"NodeNames": ["n-0-2", "n-0-0"], "FailedNodes": {},
                                                         "Error": ""}
    for names in (b'[1, 2]', b'5', b'{"a": 1}'):
        bad = service.client.post("/scheduler/guard", content=b'{"Pod": ' + json.dumps(pods[1]).encode()
                                  + b', "Nodes": null, "NodeNames": ' + names + b'}')
        assert bad.status_code == 400, (names, bad.text)
