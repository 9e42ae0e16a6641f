"""meshfit binds a reserved gang's members itself: safely on their nodes, once each, never with a wrong rendezvous."""

from __future__ import annotations

import threading
import time

import pytest
from starlette.testclient import TestClient

from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import SLOT_BINDING, SLOT_RELEASED
from scheduler.kube.node_fit import RoomFit, pod_needs
from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from scheduler.service.binding.binder import BindConflict

from tests.service.helpers import (
    FakeClock, Service, filter_nodes, gang_pod, make_nodes, make_pod, memory_direct_binding,
)


def fit_nodes(racks: int = 2, per_rack: int = 4, **changes) -> list[dict]:
    """GPU nodes with the allocatable kube-scheduler checks (cpu, memory, pods); `changes[name]` updates one."""
    nodes = make_nodes(racks, per_rack)
    for node in nodes:
        node["status"]["allocatable"].update({"cpu": "64", "memory": "512Gi", "pods": "110"})
        for key, value in changes.get(node["metadata"]["name"], {}).items():
            node["spec" if key in ("taints", "unschedulable") else "status"][key] = value
    return nodes


class CountingBinder(MemoryBinder):
    """MemoryBinder counting calls, optionally failing the next `failures` or blocking on `gate`."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.failures = 0
        self.conflicts = 0
        self.gate: threading.Event | None = None

    def bind(self, namespace, name, uid, node, annotations) -> None:
        """Count, then fail / block / bind."""
        self.calls.append(name)
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.conflicts:
            self.conflicts -= 1
            raise BindConflict(f"pod {namespace}/{name} not found")
        if self.failures:
            self.failures -= 1
            raise ConnectionError("apiserver unreachable")
        super().bind(namespace, name, uid, node, annotations)


def direct_service(nodes: list[dict] | None = None, synchronous: bool = True, nominator=None, backlog_limit: int = 128,
                   always_nominate: bool = False, **options) -> Service:
    """A service whose scheduler binds reserved members itself (the real mode's wiring, in memory; `nominator`
    instead of the in-memory one; `always_nominate`: `meshfit serve --always-nominate`)."""
    clock = FakeClock()
    state = ClusterState(clock=clock)
    state.needs_of = pod_needs
    state.watch_is_truth = True
    state.replace_all(nodes if nodes is not None else fit_nodes(), [], [])
    binder = CountingBinder()
    scheduler, metrics = build_scheduler(state, binder, "first-fit", actions=MemoryActions(),
                                         synchronous_actions=synchronous,
                                         direct_binding=memory_direct_binding(state, nominator=nominator,
                                                                              backlog_limit=backlog_limit,
                                                                              always_nominate=always_nominate),
                                         **options)
    return Service(state, scheduler, binder, TestClient(create_app(scheduler, metrics)), clock)


def members(name: str, size: int, **kwargs) -> list[dict]:
    """The pods of one `meshfit.io/gang` gang of meshfit's scheduler profile."""
    pods = [gang_pod(name, i, size, **kwargs) for i in range(size)]
    for pod in pods:
        pod["spec"]["schedulerName"] = "meshfit"
    return pods


def watch(service: Service, pods: list[dict]) -> None:
    """The API server reports these pods (pending)."""
    for pod in pods:
        service.state.upsert_pod(pod)


def bound(service: Service) -> dict[str, str]:
    """Pod name -> node of every Binding posted."""
    return {b.name: b.node for b in service.binder.snapshot()}


def test_the_first_member_reserves_and_meshfit_binds_every_other_member_once():
    service = direct_service()
    pods = members("g", 4)
    watch(service, pods)
    [node] = filter_nodes(service.filter(pods[2]))  # kube-scheduler asks about one member: the gang is reserved
    assert sorted(service.binder.calls) == ["g-0", "g-1", "g-3"]  # the others, at once, by meshfit
    assert service.bind(pods[2], node) == {"Error": ""}  # the one kube-scheduler handles goes through /bind
    assert sorted(service.binder.calls) == ["g-0", "g-1", "g-2", "g-3"]  # one Binding per pod, no more
    entry = service.state.ledger.get("default/g")
    assert entry.status == "bound" and bound(service) == {f"g-{i}": entry.node_of(i) for i in range(4)}
    masters = {b.annotations["meshfit.io/master-addr"] for b in service.binder.snapshot()}
    assert masters == {entry.node_of(0)}
    assert service.scheduler.actions.of("requeue") == []  # nothing parked, nothing to requeue


def test_a_member_kube_scheduler_asks_about_after_meshfit_bound_it_is_answered_idempotently():
    service = direct_service()
    pods = members("g", 2)
    watch(service, pods)
    [node0] = filter_nodes(service.filter(pods[0]))
    node1 = bound(service)["g-1"]
    assert filter_nodes(service.filter(pods[1])) == [node1]  # kube-scheduler's queue is behind the watch
    assert service.bind(pods[1], node1) == {"Error": ""}
    other = next(n for n in service.state.topology.node_by_name if n != node1)
    assert "already bound to node" in service.bind(pods[1], other)["Error"]
    assert service.binder.calls.count("g-1") == 1


def test_a_member_whose_node_selector_matches_no_node_keeps_its_gang_unplaced():
    service = direct_service()
    pods = members("g", 2)
    pods[1]["spec"]["nodeSelector"] = {"pool": "other"}
    watch(service, pods)
    reply = service.filter(pods[0])
    assert reply["NodeNames"] == [] and service.binder.calls == []  # no member reserved, none bound alone
    assert "fail its node constraints" in next(iter(reply["FailedNodes"].values()))


@pytest.mark.parametrize("spec_change,reason", [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}]}}}, "inter-pod"),
    ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}, "persistent volume"),
], ids=["pod-anti-affinity", "pvc"])
def test_a_member_meshfit_cannot_vouch_for_is_left_to_kube_scheduler(spec_change, reason, caplog):
    service = direct_service()
    pods = members("g", 2)
    pods[1]["spec"].update({k: v for k, v in spec_change.items() if v is not None})
    watch(service, pods)
    with caplog.at_level("INFO", logger="meshfit.bind"):
        filter_nodes(service.filter(pods[0]))
    assert "g-1" not in service.binder.calls  # not bound by meshfit; kube-scheduler's filters decide
    assert reason in caplog.text


def test_resources_of_members_binding_to_one_node_are_counted_together():
    nodes = fit_nodes(1, 2, **{"n-0-0": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "3", "memory": "1Ti",
                                                          "pods": "110"}}})
    service = direct_service(nodes)
    pods = members("g", 4, gpus=4)  # two 4-GPU pods per node; each asks 2 CPUs; n-0-0 has 3
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    watch(service, pods)
    filter_nodes(service.filter(pods[3]))
    on_small = [name for name, node in bound(service).items() if node == "n-0-0"]
    assert len(on_small) <= 1  # the second pod there would over-commit its CPU: left to kube-scheduler


def nominated_pod(name: str, node: str, priority: int, cpu: str) -> dict:
    """An unbound CPU pod kube-scheduler nominated to `node` after preempting there (it waits for its victims)."""
    pod = make_pod(name, gpus=0)
    pod["spec"]["priority"] = priority
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    pod["status"]["nominatedNodeName"] = node
    return pod


def test_a_pod_nominated_to_a_node_keeps_its_room_there_from_members_of_no_higher_priority():
    service = direct_service(fit_nodes(1, 2))  # 64 CPUs per node
    fits = RoomFit(service.state).fits
    member = members("g", 2)[0]
    member["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    watch(service, [member, nominated_pod("preemptor", "n-0-0", 1000, "60")])
    record = service.state.pod("default", "g-0")
    assert "insufficient cpu" in fits(record, "n-0-0")  # 60 of 64 CPUs promised to the preemptor
    assert fits(record, "n-0-1") == ""
    watch(service, [nominated_pod("low", "n-0-1", -5, "60")])  # lower priority than the member: not counted
    assert fits(record, "n-0-1") == ""
    preemptor = nominated_pod("preemptor", "n-0-0", 1000, "60")
    preemptor["spec"]["nodeName"] = "n-0-1"  # bound elsewhere in the end: n-0-0 is free again
    watch(service, [preemptor])
    assert fits(record, "n-0-0") == ""
    assert "insufficient cpu" in fits(record, "n-0-1")  # where it is bound it counts as a bound pod
    service.state.delete_pod("default", "low")
    assert service.state.room.claim(service.state.pod("default", "preemptor").uid).state == "bound"
    assert [c.key for c in service.state.room.on_node("n-0-1").values() if c.state == "nominated"] == []


def test_a_gang_is_not_bound_by_meshfit_into_room_a_preemptor_was_promised():
    service = direct_service(fit_nodes(1, 2))
    pods = members("g", 2)
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    watch(service, [*pods, nominated_pod("preemptor", "n-0-0", 1000, "60")])
    reply = service.filter(pods[1])
    assert service.binder.calls == [] and reply["NodeNames"] == []  # nothing bound into the promised room
    assert service.state.ledger.get("default/g") is None  # the gang waits whole: a member fits on one node only
    assert "1 node(s) with 8 free GPUs have no room for a member's other requests" in reply["FailedNodes"]["n-0-0"]


def test_a_taint_meshfit_tolerates_but_the_member_does_not_keeps_meshfit_from_binding_it():
    nodes = fit_nodes(1, 2)
    for node in nodes:  # meshfit runs with --toleration dedicated=gpu (it may place there), the pods decide
        node["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    clock = FakeClock()
    state = ClusterState(tolerations=["dedicated=gpu:NoSchedule"], clock=clock)
    state.needs_of, state.watch_is_truth = pod_needs, True
    state.replace_all(nodes, [], [])
    binder = CountingBinder()
    scheduler, _ = build_scheduler(state, binder, "first-fit", actions=MemoryActions(), synchronous_actions=True,
                                   direct_binding=memory_direct_binding(state))
    pods = members("g", 2)
    pods[0]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    watch(Service(state, scheduler, binder, None, clock), pods)
    decision = scheduler.filter(pods[0], sorted(state.topology.node_by_name))
    assert binder.calls == [] and not decision.nodes  # g-1 tolerates no node: the gang is not placed, it waits whole
    assert state.ledger.get("default/g") is None
    assert "fail its node constraints" in next(iter(decision.failed.values()))


def test_fit_reason_follows_kube_schedulers_node_local_filters():
    from scheduler.kube.node_fit import fit_reason

    node = fit_nodes(1, 1)[0]
    needs = pod_needs({"spec": {"containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
                                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpressions": [
                                        {"key": "network.topology.nvidia.com/leaf", "operator": "In",
                                         "values": ["rack-0"]}]}]}}}}})
    assert fit_reason(needs, node, {}) == ""
    assert "insufficient cpu" in fit_reason(needs, node, {"cpu": 63})
    assert fit_reason(needs, {**node, "spec": {"unschedulable": True}}, {}) == "node is cordoned"
    other = {**node, "metadata": {**node["metadata"], "labels": {"network.topology.nvidia.com/leaf": "rack-1"}}}
    assert "node affinity" in fit_reason(needs, other, {})
    no_execute = {**node, "spec": {"taints": [{"key": "gpu-broken", "effect": "NoExecute"}]}}
    assert "untolerated taint" in fit_reason(needs, no_execute, {})
    prefer = {**node, "spec": {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}}
    assert fit_reason(needs, prefer, {}) == ""


def test_failed_bindings_are_retried_with_backoff_and_conflicts_wait_for_the_pod_to_change():
    service = direct_service()
    pods = members("g", 3)
    watch(service, pods)
    service.binder.failures = 1  # the first of meshfit's Bindings (g-1 or g-2) fails
    filter_nodes(service.filter(pods[0]))
    entry = service.state.ledger.get("default/g")
    failed = [n for n in ("g-1", "g-2") if n not in bound(service)]
    assert len(failed) == 1 and entry.slots[int(failed[0][-1])].state == "reserved"  # held, not lost
    service.scheduler.tick()
    assert failed[0] not in bound(service)  # backoff: not at once
    service.clock.advance(1.0)
    service.scheduler.tick()
    assert failed[0] in bound(service)
    # a conflict (the pod is gone or changed under meshfit) waits for the watch to report the pod again
    more = members("h", 2)
    watch(service, more)
    service.binder.conflicts = 1
    filter_nodes(service.filter(more[0]))
    assert "h-1" not in bound(service)
    service.clock.advance(60)
    service.scheduler.tick()
    assert "h-1" not in bound(service)  # the same pod version: not tried again
    more[1]["metadata"]["resourceVersion"] = "2"
    watch(service, more[1:])  # a new version of the pod: tried again, bound
    service.scheduler.run_direct_binds()  # (synchronous test mode; a worker thread posts it at once otherwise)
    assert "h-1" in bound(service)


def test_no_member_is_bound_without_a_node_held_for_pod_0():
    service = direct_service()
    pods = members("g", 3)
    watch(service, pods[1:])  # pod 0 not created yet; the gang is still reserved whole (pod 0's slot held)
    filter_nodes(service.filter(pods[1]))
    entry = service.state.ledger.get("default/g")
    with service.state.lock:  # pod 0's slot lost (its node vanished) before anything was bound
        for slot in entry.slots.values():
            if slot.pod == "g-2":
                service.state.ledger.unmark_binding("default/g", slot.index)
        service.state.topology.remove_pod(f"resv:default/g/0")
        entry.slots[0].state = SLOT_RELEASED
        started = service.scheduler.direct.kick("default/g")
    assert started == 0
    assert all(b.annotations["meshfit.io/master-addr"] for b in service.binder.snapshot())


def test_kube_schedulers_bind_of_a_member_in_flight_waits_for_meshfits_binding(request):
    service = direct_service(synchronous=False)
    request.addfinalizer(service.scheduler.shutdown)  # its waker and pools end with the test
    pods = members("g", 2)
    watch(service, pods)
    service.binder.gate = threading.Event()
    [node0] = filter_nodes(service.filter(pods[0]))
    entry = service.state.ledger.get("default/g")
    deadline = time.monotonic() + 5  # the nomination is written on a worker, then the gang is kicked
    while entry.slots[1].state != SLOT_BINDING and time.monotonic() < deadline:
        time.sleep(0.01)
    assert entry.slots[1].state == SLOT_BINDING  # meshfit's Binding of g-1 is in flight
    node1 = entry.node_of(1)
    reply: dict = {}
    waiter = threading.Thread(target=lambda: reply.update(service.bind(pods[1], node1)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # kube-scheduler's /bind waits for meshfit's outcome
    service.binder.gate.set()
    waiter.join(10)
    assert reply == {"Error": ""} and service.binder.calls.count("g-1") == 1
    service.scheduler.direct.shutdown()


def test_a_pod_of_another_scheduler_profile_is_never_bound_by_meshfit():
    service = direct_service()
    pods = members("g", 2)
    pods[1]["spec"]["schedulerName"] = "default-scheduler"
    watch(service, pods)
    filter_nodes(service.filter(pods[0]))
    assert "g-1" not in service.binder.calls


def test_a_failed_members_new_pod_takes_its_slot_and_binds():
    """Job-controller finding: a member whose container failed stays as a Failed pod while the Job controller
    creates a new pod for its index; the Failed pod was taken for the member (pods disagreed, it was requeued
    every 2 s) and the new pod never bound."""
    service = direct_service()
    pods = members("g", 4)
    watch(service, pods)
    [node] = filter_nodes(service.filter(pods[0]))
    assert service.bind(pods[0], node) == {"Error": ""}
    for pod in pods:  # the watch reports them bound, with the annotations meshfit's Bindings wrote
        binding = service.binder.bindings[("default", pod["metadata"]["name"])]
        pod["spec"]["nodeName"], pod["status"]["phase"] = binding.node, "Running"
        pod["metadata"]["annotations"].update(binding.annotations)
        pod["metadata"]["resourceVersion"] = "2"
    watch(service, pods)
    assert service.state.ledger.get("default/g").status == "bound"
    pods[2]["status"]["phase"], pods[2]["metadata"]["resourceVersion"] = "Failed", "3"
    watch(service, [pods[2]])
    again = members("g", 4)[2]
    again["metadata"].update(name="g-2-b", uid="uid-g-2-b")  # the Job controller's new pod for index 2
    watch(service, [again])
    service.scheduler.tick()
    service.clock.advance(6)  # past the direct binder's grace for pods kube-scheduler is working on
    service.scheduler.tick()
    assert ("default", "g-2-b") in service.binder.bindings
    entry = service.state.ledger.get("default/g")
    assert entry.status == "bound" and entry.slots[2].pod == "g-2-b"
    assert not [c for c in service.scheduler.actions.of("requeue") if c.pod.name == "g-2"]
