"""A partly bound gang's member whose pod is gone keeps its room on its node until the recreated pod is held there
(the 30-minute 1.35 soak: mg00851's rank 0 was deleted, a CPU pod took its node's CPU before the job controller's
new pod arrived, and the gang stayed partly bound because pod 0 may run nowhere else)."""

from __future__ import annotations

import copy

from scheduler.cache.room_ledger import MESHFIT_HOLDS
from scheduler.kube.node_fit import own_claims

from scheduler.cache.state import ClusterState
from scheduler.kube.node_fit import pod_needs
from tests.service.test_direct_binding import bound, direct_service, watch
from tests.service.test_nomination_fence import cpu_nodes, cpu_pod, gang, reserve
from tests.service.test_room_guard import guard

ALL = ["n-0-0", "n-0-1", "n-0-2"]


def whole_gang(service) -> tuple[list[dict], dict[int, str]]:
    """Gang g (2 members, 10 CPUs and 40 GiB each) reserved and bound, as the watch then reports it: (the bound pods,
    index -> node)."""
    pods = gang("g", 2)
    reserve(service, pods)
    entry = service.state.ledger.get("default/g")
    nodes = {i: entry.node_of(i) for i in range(2)}
    assert service.bind(pods[0], nodes[0]) == {"Error": ""}  # pod 0 is kube-scheduler's to bind (it asked)
    given = {b.name: b for b in service.binder.snapshot()}
    running = []
    for index, pod in enumerate(pods):
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = nodes[index]
        pod["status"]["phase"] = "Running"
        pod["metadata"]["annotations"].update(given[pod["metadata"]["name"]].annotations)
        running.append(pod)
    watch(service, running)
    assert service.state.ledger.get("default/g").status == "bound"
    service.clock.advance(11.0)  # past `/guard`'s recent-Binding window: kube-scheduler's cache counts them now
    service.scheduler.tick()
    return pods, nodes


def recreated(pod: dict, uid: str) -> dict:
    """The pod its controller creates again after a delete: same name and spec, a new uid, pending."""
    again = copy.deepcopy(pod)
    again["metadata"]["uid"] = uid
    again["spec"].pop("nodeName", None)
    again["status"] = {"phase": "Pending"}
    return again


def test_a_deleted_rank_0_keeps_its_room_and_its_recreated_pod_is_bound_back_on_its_node():
    service = direct_service(cpu_nodes(3))
    pods, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")  # gone (evicted, a fault); the job controller recreates it soon
    service.binder.unbind("default", "g-0")  # the API server has no Binding of a deleted pod
    reply = guard(service, cpu_pod("cpu", priority=1000))
    assert nodes[0] in reply["FailedNodes"], reply  # 16 CPUs - 10 kept for pod 0 < 8
    assert "insufficient cpu" in reply["FailedNodes"][nodes[0]]
    assert nodes[1] not in reply["FailedNodes"]  # the bound member there is kube-scheduler's to count
    assert service.scheduler.direct.vacancies.counted() == {("default/g", 0): (nodes[0], pod_needs(pods[0]).requests)}
    calls = len(service.binder.calls)
    watch(service, [recreated(pods[0], "uid-g-0-again")])
    service.scheduler.tick()
    assert service.binder.calls[calls:] == ["g-0"] and bound(service)["g-0"] == nodes[0]
    assert service.scheduler.direct.vacancies.counted() == {}


def test_without_the_vacancy_the_cpu_pod_would_have_been_given_the_node():
    """The same delete with a small pod that fits beside the kept room: the node is offered (the check can fail)."""
    service = direct_service(cpu_nodes(3))
    _, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")
    small = cpu_pod("small", priority=1000)
    small["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "6", "memory": "20Gi"})
    assert nodes[0] in guard(service, small)["NodeNames"]


def test_a_vacancy_is_counted_against_the_other_members_and_lone_gpu_pods_not_against_its_own_pod():
    service = direct_service(cpu_nodes(3))
    pods, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")
    direct = service.scheduler.direct
    again = service.state.record_from_request(recreated(pods[0], "uid-g-0-again"))
    room = service.state.room
    assert room.meshfit_only(nodes[0], own_claims(again)) == {}  # its own: not counted
    other = service.state.record_from_request(gang("h", 1)[0])
    assert room.meshfit_only(nodes[0], own_claims(other)) == dict(pod_needs(pods[0]).requests)
    assert direct is service.scheduler.direct


def test_a_vacancy_goes_when_the_gang_is_rolled_back_or_its_slot_is_released():
    service = direct_service(cpu_nodes(3))
    _, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")
    assert service.scheduler.direct.vacancies.counted()
    service.state.delete_pod("default", "g-1")  # the whole gang gone (the job deleted)
    service.scheduler.tick()
    assert service.scheduler.direct.vacancies.counted() == {} and service.state.room.count(*MESHFIT_HOLDS) == 0
    assert nodes[0] in guard(service, cpu_pod("cpu", priority=1000))["NodeNames"]


def test_after_a_restart_a_partly_bound_gangs_missing_rank_0_has_its_room_kept_from_its_peers_requests():
    """A new leader never saw the pod go: the room kept is the largest of the live members' requests."""
    service = direct_service(cpu_nodes(3))
    pods, nodes = whole_gang(service)
    fresh = direct_service(cpu_nodes(3))
    peer = copy.deepcopy(pods[1])
    peer["spec"]["nodeName"] = nodes[1]
    peer["status"]["phase"] = "Running"
    peer["metadata"]["annotations"].update({b.name: b for b in service.binder.snapshot()}["g-1"].annotations)
    state: ClusterState = fresh.state
    state.replace_all(cpu_nodes(3), [peer], [])  # the relist: g-1 bound, g-0 not recreated yet
    entry = state.ledger.get("default/g")
    assert entry.node_of(0) == nodes[0]  # pod 0 held on the master address its peer was given
    assert fresh.scheduler.direct.vacancies.counted() == {("default/g", 0): (nodes[0], pod_needs(pods[1]).requests)}
    assert nodes[0] in guard(fresh, cpu_pod("cpu", priority=1000))["FailedNodes"]


def test_a_recreated_rank_0_whose_room_was_taken_anyway_waits_on_its_node_and_says_why():
    """`/guard` is `ignorable`: in an outage of meshfit kube-scheduler places pods without asking.  Pod 0 cannot move
    (its peers run with its node as master-addr): it is not moved, and the reason says so instead of "0 free GPUs"."""
    service = direct_service(cpu_nodes(3))
    pods, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")
    watch(service, [cpu_pod("cpu", node=nodes[0])])  # placed while /guard was unreachable
    again = recreated(pods[0], "uid-g-0-again")
    again["status"]["nominatedNodeName"] = nodes[0]  # kube-scheduler tries its nominated node first
    watch(service, [again])
    service.scheduler.tick()
    assert "g-0" not in [b.name for b in service.binder.snapshot()][2:]  # not bound into the over-committed node
    others = [n for n in ALL if n != nodes[0]]
    reply = service.filter(again, others)  # kube-scheduler's filters reject the taken node
    assert reply["NodeNames"] in (None, []) and "master-addr" in str(reply), reply
    assert "0 free GPU" not in str(reply)
    assert service.state.ledger.get("default/g").node_of(0) == nodes[0]


def test_a_replacement_nominated_on_its_slot_is_not_counted_twice():
    """Its nomination is counted by the room ledger (a `nominated` claim); a vacancy on top would count it twice."""
    service = direct_service(cpu_nodes(3))
    pods, nodes = whole_gang(service)
    service.state.delete_pod("default", "g-0")
    again = recreated(pods[0], "uid-g-0-again")
    again["status"]["nominatedNodeName"] = nodes[0]
    direct = service.scheduler.direct
    service.state.member_watched = None  # the watch reports it before the binder acts on it: nothing held yet
    watch(service, [again])
    direct.refresh_vacancies("default/g")
    assert direct.vacancies.counted() == {} and service.state.room.meshfit_only(nodes[0]) == {}
    assert [c.state for c in service.state.room.on_node(nodes[0]).values() if c.key == "uid-g-0-again"] == ["nominated"]
