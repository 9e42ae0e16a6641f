"""A member whose Binding the watch shows before meshfit's call returns is counted once on its node, not twice (in
the watch's bound pods and in the Bindings in flight): its peers checked in that window still fit beside it.  A lone
GPU pod is still kept off that room until kube-scheduler's cache can count it, at `/filter` and again at `/bind`."""

from __future__ import annotations

import threading
import time

from scheduler.cache.room_ledger import MESHFIT_HOLDS as MESHFIT_STATES
from tests.service.helpers import filter_nodes, make_pod
from tests.service.test_direct_binding import bound, direct_service, members, watch
from tests.service.test_nomination_fence import cpu_nodes


def small_gang(name: str, size: int) -> list[dict]:
    """A gang of 2-GPU members asking 5 CPUs each: three fill a 16-CPU node but for one CPU."""
    pods = members(name, size, gpus=2)
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    return pods


def wait_until(predicate, what: str, timeout: float = 5.0) -> None:
    """Poll `predicate` until true; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def landed(pod: dict, node: str) -> dict:
    """The watch's view of `pod` once its Binding is in: bound to `node`."""
    bound = {**pod, "spec": {**pod["spec"], "nodeName": node}}
    return bound


def test_a_peer_checked_while_a_landed_binding_is_still_in_flight_fits_beside_it(request):
    service = direct_service(cpu_nodes(1), synchronous=False)
    request.addfinalizer(service.scheduler.shutdown)  # its waker and pools end with the test
    direct = service.scheduler.direct
    service.binder.gate = threading.Event()  # meshfit's calls stay in flight
    try:
        pods = small_gang("g", 3)
        watch(service, pods[:2])  # the third member's pod is not created yet
        filter_nodes(service.filter(pods[0]))  # kube-scheduler asks about g-0: the gang is reserved, g-1 is meshfit's
        service.clock.advance(5.0)  # past the wait for members not created yet
        service.scheduler.tick()
        wait_until(lambda: service.binder.calls == ["g-1"], "g-1's Binding started")
        node = service.state.ledger.get("default/g").node_of(1)
        watch(service, [landed(pods[1], node)])  # the watch shows g-1 bound; meshfit's call has not returned
        assert direct.counts_unseen(node)  # kube-scheduler's cache may not show it yet: /guard, /filter still count it
        service.clock.advance(1.0)
        watch(service, pods[2:])  # the last member arrives: 5 + 5 + 5 CPUs of 16 on the node
        refused = service.state.pod("default", "g-2").uid
        wait_until(lambda: "g-2" in service.binder.calls or refused in direct.refused or direct.counts["no_longer_fit"],
                   "the last member's Binding started or was refused")
        assert direct.refused == {} and direct.counts["no_longer_fit"] == 0 and "g-2" in service.binder.calls
    finally:
        service.binder.gate.set()
        direct.shutdown()
    assert service.bind(pods[0], node) == {"Error": ""}  # kube-scheduler binds the member it was told about
    assert service.state.ledger.get("default/g").status == "bound"
    assert service.state.room.count(*MESHFIT_STATES) == 0  # nothing left held or binding once every call returned


def lone_gpu_pod(name: str, cpu: str) -> dict:
    """A 2-GPU pod of meshfit's profile outside any gang, asking `cpu` CPUs (kube-scheduler places it via `/filter`
    and binds it through `/bind`)."""
    pod = make_pod(name, gpus=2)
    pod["spec"]["schedulerName"] = "meshfit"
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return pod


def test_a_lone_gpu_pod_is_refused_a_node_a_member_was_just_bound_to_until_kube_scheduler_can_count_it():
    service = direct_service(cpu_nodes(2))
    pods = small_gang("g", 2)
    watch(service, pods)
    [node] = filter_nodes(service.filter(pods[0]))
    assert service.bind(pods[0], node) == {"Error": ""}  # kube-scheduler binds the member it was told about
    assert bound(service).keys() == {"g-0", "g-1"} and service.state.room.count(*MESHFIT_STATES) == 0
    lone = lone_gpu_pod("lone", "7")  # 5 + 5 + 7 CPUs: not beside the two members
    watch(service, [lone])
    assert node not in filter_nodes(service.filter(lone))  # kube-scheduler's cache may not count them yet
    service.clock.advance(11.0)
    service.scheduler.tick()
    assert node in filter_nodes(service.filter(lone))  # by now it does: its own filters judge the node


def test_a_lone_gpu_pod_answered_before_a_member_was_held_is_refused_at_bind():
    service = direct_service(cpu_nodes(1))
    lone = lone_gpu_pod("lone", "7")
    watch(service, [lone])
    assert filter_nodes(service.filter(lone)) == ["n-0-0"]  # nothing held there yet
    pods = small_gang("g", 2)
    watch(service, pods)
    assert filter_nodes(service.filter(pods[0])) == ["n-0-0"]  # the gang is reserved there after the answer
    reply = service.bind(lone, "n-0-0")
    assert "does not fit node n-0-0 now" in reply["Error"] and "insufficient cpu" in reply["Error"]
    assert "lone" not in bound(service) and service.state.pod("default", "lone").node is None
