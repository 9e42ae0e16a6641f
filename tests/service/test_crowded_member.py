"""A member kube-scheduler places itself is checked against what meshfit binds beside it, at `/filter` and at `/bind`
(the 30-minute 1.35 soak: n005 was re-added, kube-scheduler placed an 8-CPU pod there and then a gang member its
filters passed because its cache did not count the three members meshfit had just bound there: 18 CPUs of 16)."""

from __future__ import annotations

from scheduler.cache.room_ledger import BOUND_STATES
from tests.service.helpers import filter_nodes
from tests.service.test_direct_binding import bound, direct_service, members, watch
from tests.service.test_nomination_fence import cpu_nodes, cpu_pod

NODE = "n-0-0"


def small_gang() -> list[dict]:
    """Four members of 2 GPUs, 2.5 CPUs and 10 GiB each: all four fit one 8-GPU, 16-CPU node (10 CPUs)."""
    pods = members("g", 4, gpus=2)
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "2500m", "memory": "10Gi"})
    return pods


def reserved_with_three_bound_by_meshfit():
    """One node; kube-scheduler asks `/filter` about g-0 (the gang is reserved there, g-0 is kube-scheduler's to bind)
    and meshfit binds g-1..g-3 at once; then the watch shows an 8-CPU pod kube-scheduler bound there, its cache not
    counting meshfit's three Bindings yet."""
    service = direct_service(cpu_nodes(1))
    pods = small_gang()
    watch(service, pods)
    assert filter_nodes(service.filter(pods[0])) == [NODE]
    assert sorted(bound(service)) == ["g-1", "g-2", "g-3"]
    watch(service, [cpu_pod("cpu", node=NODE)])
    return service, pods


def node_cpu_requested(service) -> float:
    """CPUs the bound pods and meshfit's Bindings take on NODE, as the API server will have them."""
    cpu = float(sum(c.requests.get("cpu", 0) for c in service.state.room.on_node(NODE).values() if c.state in BOUND_STATES))
    return cpu + sum(2.5 for b in service.binder.snapshot() if b.name == "g-0")


def test_kube_scheduler_filtering_a_member_onto_a_node_meshfit_filled_is_refused():
    service, pods = reserved_with_three_bound_by_meshfit()
    reply = service.filter(pods[0], [NODE])  # kube-scheduler's filters passed the node (its cache is behind)
    assert filter_nodes(reply) == [], reply
    assert "insufficient cpu" in str(reply["FailedNodes"][NODE])
    assert node_cpu_requested(service) <= 16


def test_kube_schedulers_bind_of_a_member_whose_room_was_taken_since_its_filter_is_refused():
    service, pods = reserved_with_three_bound_by_meshfit()
    reply = service.bind(pods[0], NODE)  # it assumed g-0 at the first /filter, before the CPU pod landed
    assert "does not fit node" in reply["Error"], reply
    assert "g-0" not in bound(service) and node_cpu_requested(service) <= 16


def test_a_member_that_fits_beside_meshfits_bindings_is_still_offered_and_bound():
    """The check can pass: with a 4-CPU pod instead, 16 - 7.5 - 4 leaves room for g-0."""
    service = direct_service(cpu_nodes(1))
    pods = small_gang()
    watch(service, pods)
    filter_nodes(service.filter(pods[0]))
    small = cpu_pod("cpu", node=NODE)
    small["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "4", "memory": "10Gi"})
    watch(service, [small])
    assert filter_nodes(service.filter(pods[0], [NODE])) == [NODE]
    assert service.bind(pods[0], NODE) == {"Error": ""}
    assert bound(service)["g-0"] == NODE


def test_a_pending_pod_that_fits_beside_each_member_but_not_beside_all_of_them_holds_the_gang_back():
    """The 8-CPU pod was pending, kube-scheduler possibly placing it at that moment (not answered since the holds): it
    fits the 16-CPU node beside any one 2.5-CPU member, but not beside g-0 (kube-scheduler's) and three more.  So the
    member that would not leave it room is nominated and fenced instead of bound at once, and the gang, nothing of it
    bound yet, waits for it whole (before: g-1, g-2 and g-3 were all bound at once, 18 CPUs once the pod landed)."""
    service = direct_service(cpu_nodes(1))
    watch(service, [cpu_pod("cpu")])
    pods = small_gang()
    watch(service, pods)
    assert filter_nodes(service.filter(pods[0])) == [NODE]
    assert bound(service) == {}
    assert service.scheduler.direct.counts["nominated"] >= 1
    watch(service, [cpu_pod("cpu", node=NODE)])  # the pod landed there: the whole gang no longer fits the node
    service.scheduler.tick()
    assert bound(service) == {} and node_cpu_requested(service) <= 16
