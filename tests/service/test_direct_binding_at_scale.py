"""Faults of the direct binding path that a 5,000-node burst showed (docs/architecture.md, "The tail fixed at 5,000
nodes"): lone GPU pods at the fence, admission while members wait, a member counted twice, left-over nominations."""

from __future__ import annotations

from tests.service.helpers import filter_nodes
from tests.service.test_direct_binding import bound, direct_service, members, watch
from tests.service.test_nomination_fence import cpu_nodes, cpu_pod, gang, reserve


def lone_gpu_pod(name: str) -> dict:
    """A lone 1-GPU pod of meshfit's profile asking 8 CPUs and 30 GiB: kube-scheduler places it, after meshfit's
    `/filter` has offered it nodes."""
    pod = cpu_pod(name)
    pod["spec"]["schedulerName"] = "meshfit"
    pod["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "1", "cpu": "8", "memory": "30Gi"}
    return pod


def test_a_lone_gpu_pod_of_meshfits_profile_never_asked_about_does_not_fence_the_member():
    """At 1,000 nodes the burst's lone GPU pods that waited for GPUs held almost every member for the whole fence
    limit (1,219 members timed out of 1,820): such a pod can only land where meshfit's /filter offers it."""
    service = direct_service(cpu_nodes(2))
    watch(service, [lone_gpu_pod("lone")])  # pending; kube-scheduler has not asked meshfit about it yet
    node = reserve(service, gang("g", 2))
    assert bound(service) == {"g-1": node}
    assert service.scheduler.direct.fence.counts["waited"] == 0


def test_a_lone_gpu_pod_offered_the_node_before_the_member_was_held_fences_it_until_it_changes():
    service = direct_service(cpu_nodes(2))
    lone = lone_gpu_pod("lone")
    lone["metadata"]["resourceVersion"] = "1"
    watch(service, [lone])
    offered = filter_nodes(service.filter(lone))  # its cycle may be past meshfit's answer, assuming it on a node
    node = reserve(service, gang("g", 2))
    assert node in offered and service.binder.calls == []  # fenced: that cycle may put it into the member's room
    assert service.scheduler.direct.fence.counts["waited"] >= 1
    changed = lone_gpu_pod("lone")
    changed["metadata"]["resourceVersion"] = "2"
    changed["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    watch(service, [changed])  # kube-scheduler wrote its verdict: that cycle ended without a Binding
    service.scheduler.tick()
    assert bound(service) == {"g-1": node}


def test_a_lone_gpu_pod_asked_about_after_the_member_is_held_is_not_offered_its_room():
    service = direct_service(cpu_nodes(2))
    watch(service, [cpu_pod("early")])  # holds the member at the fence for a while (a CPU pod of before)
    lone = lone_gpu_pod("lone")
    watch(service, [lone])
    pods = gang("g", 2)
    for pod in pods:  # 4-GPU members: their nodes keep 4 GPUs free, so only the CPU check can refuse the lone pod
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "4"
    node = reserve(service, pods)
    assert service.binder.calls == []
    reply = service.filter(lone)
    assert node not in filter_nodes(reply)  # 8 + 10 CPUs do not fit in 16: the member's room is refused
    assert "beside gang members reserved there" in reply["FailedNodes"][node]
    service.clock.advance(2.5)
    service.scheduler.tick()
    assert bound(service) == {"g-1": node}


def test_the_queue_admits_no_gang_while_members_it_reserved_are_held_unbound():
    """At 5,000 nodes, with only Bindings in flight counted, the queue reserved 384 gangs in 20 s while their members
    waited for nominations and the fence, and kube-scheduler's /filter calls timed out behind those passes."""
    service = direct_service(cpu_nodes(4), backlog_limit=2)  # `meshfit serve --bind-backlog 2`
    watch(service, [cpu_pod("early")])  # fences the first gang's members for a while
    watch(service, gang("a", 2) + gang("b", 2))
    service.scheduler.tick()
    service.clock.advance(3.5)  # nobody asked about them: meshfit queues them from the watch
    service.scheduler.tick()
    reserved = [key for key in ("default/a", "default/b") if service.state.ledger.get(key) is not None]
    assert len(reserved) == 1 and service.scheduler.direct.bind_backlog() == 2  # held, fenced, not bound
    service.clock.advance(2.5)
    service.scheduler.tick()  # the fence passed: the first gang binds
    first = reserved[0].split("/")[1]
    assert sorted(bound(service)) == [f"{first}-0", f"{first}-1"]
    for pod in gang(first, 2):  # the watch reports them bound: no longer held
        pod["spec"]["nodeName"] = bound(service)[pod["metadata"]["name"]]
        watch(service, [pod])
    service.scheduler.tick()
    assert all(service.state.ledger.get(key) is not None for key in ("default/a", "default/b"))  # the queue went on


def test_a_left_over_nomination_of_a_member_reserved_elsewhere_takes_no_room():
    """At 5,000 nodes, nominations of members moved or released before their nomination was cleared made 1,003
    members "no longer fit" rooms their own gang held, one gang at a time, and one gang ended partly bound."""
    service = direct_service(cpu_nodes(2))
    stale = members("a", 3)[:2]  # a gang still waiting for its third pod: nothing of it is reserved
    for pod, node in zip(stale, ("n-0-1", "n-0-0")):
        pod["status"]["nominatedNodeName"] = node  # nominated before its reservation was released
    watch(service, stale)
    assert service.state.ledger.get("default/a") is None
    node = reserve(service, gang("g", 2))
    assert bound(service) == {"g-1": node}
    assert service.scheduler.direct.counts["no_longer_fit"] == 0


def test_a_member_kube_scheduler_asks_about_while_its_binding_is_in_flight_is_counted_once():
    """At 5,000 nodes on 1.35 kube-scheduler tried members on their nominated node at once, and a member told its node
    at /filter while meshfit's Binding of it was in flight was counted twice: 1,021 members 'no longer fit' their own
    room ("8 requested, 0 free") and were moved."""
    service = direct_service(cpu_nodes(2))
    watch(service, [cpu_pod("early")])  # keeps g-1 at the fence, so its Binding can be started by hand below
    pods = gang("g", 2)
    node = reserve(service, pods)
    service.clock.advance(2.5)
    direct = service.scheduler.direct
    with service.state.lock:
        assert direct.kick("default/g") == 1  # the Binding of g-1 is in flight (queued on a worker)
    assert filter_nodes(service.filter(pods[1])) == [node]  # kube-scheduler asks about it meanwhile
    direct.run_pending()
    assert bound(service) == {"g-1": node} and direct.counts["no_longer_fit"] == 0


def test_a_member_whose_bind_gate_timed_out_is_bound_by_meshfit_with_its_peers(monkeypatch):
    """At 5,000 nodes on 1.26, 180 gangs ended partly bound: kube-scheduler's /bind of a member timed out at the gate
    while its peers were being nominated, and meshfit still counted the member as kube-scheduler's to bind, so the
    peers bound without it and kube-scheduler (which parks a pod whose binding failed) did not come back to it."""
    from scheduler.service.verbs import bind_verb

    monkeypatch.setattr(bind_verb, "GATE_SECONDS", 0.1)
    service = direct_service(cpu_nodes(2))
    watch(service, [cpu_pod("early")])  # keeps g-1 at the fence, so g-0's gate times out
    pods = gang("g", 2)
    reserve(service, pods)  # kube-scheduler was told g-0's node; its /bind follows
    entry = service.state.ledger.get("default/g")
    error = service.scheduler.bind("default", "g-0", pods[0]["metadata"]["uid"], entry.node_of(0))
    assert "not binding one member alone" in error and service.binder.calls == []
    service.clock.advance(2.5)  # the fence's limit: g-1 is ready
    service.scheduler.tick()
    assert bound(service) == {"g-0": entry.node_of(0), "g-1": entry.node_of(1)}  # together, by meshfit


def test_a_member_told_its_node_whose_bind_never_comes_is_taken_back():
    """kube-scheduler was told g-0's node at /filter and never called /bind (its cycle failed later, or it
    restarted): after `KUBE_TOLD_SECONDS` meshfit binds g-0 with its peer itself."""
    from scheduler.service.binding.member_holds import KUBE_TOLD_SECONDS

    service = direct_service(cpu_nodes(2))
    pods = gang("g", 2)
    reserve(service, pods)
    entry = service.state.ledger.get("default/g")
    service.scheduler.tick()
    assert bound(service) == {"g-1": entry.node_of(1)}  # g-0 is kube-scheduler's; g-1 does not wait for it
    service.clock.advance(KUBE_TOLD_SECONDS + 1)
    service.scheduler.tick()
    service.scheduler.tick()
    assert bound(service) == {"g-0": entry.node_of(0), "g-1": entry.node_of(1)}


class LaggingNominator:
    """A nominator whose writes the watch shows only when the test says: each write answers a newer resourceVersion."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def nominate(self, namespace: str, name: str, uid: str, node: str | None) -> str | None:
        """Record the write; the pod's resourceVersion after it."""
        self.calls.append((name, node))
        return str(100 + len(self.calls))


def test_a_nomination_the_watch_has_not_reached_yet_is_not_written_again():
    """At 5,000 nodes meshfit wrote a member's nomination again every second while its watch lagged behind the burst;
    a write is awaited until the watch reaches its resourceVersion, and written again only if it is gone by then."""
    nominator = LaggingNominator()
    service = direct_service(cpu_nodes(2), nominator=nominator, always_nominate=True)
    pods = gang("g", 2)
    for pod in pods:
        pod["metadata"]["resourceVersion"] = "5"
    node = reserve(service, pods)
    assert nominator.calls == [("g-1", node)]
    for _ in range(3):  # long past WATCH_LAG_SECONDS, the watch still at resourceVersion 5
        service.clock.advance(2.0)
        service.scheduler.tick()
    assert nominator.calls == [("g-1", node)]
    pods[1]["metadata"]["resourceVersion"] = "150"  # the watch reaches past the write: the nomination is not there
    watch(service, [pods[1]])
    service.scheduler.tick()
    assert nominator.calls == [("g-1", node), ("g-1", node)]  # someone cleared it: written again


def test_a_member_that_passed_the_fence_is_held_again_by_a_pod_of_higher_priority_that_arrives_later():
    """A member that passed the fence is not walked over every pending pod again (`NominationFence.passed`), but a pod
    of higher priority ignores its nomination in every cycle, so one that arrives later still holds it."""
    service = direct_service(cpu_nodes(3), always_nominate=True)
    pods = gang("g", 3)[:2]  # its third pod is not created yet: the gang waits (`MISSING_GRACE_SECONDS`)
    watch(service, pods)
    filter_nodes(service.filter(pods[0]))
    service.scheduler.tick()
    service.scheduler.tick()
    assert service.scheduler.direct.fence.passed and service.binder.calls == []
    watch(service, [cpu_pod("urgent", priority=1000)])
    service.clock.advance(3.5)  # past the grace: g-1 would bind into its slot alone now
    service.scheduler.tick()
    assert service.binder.calls == []  # the urgent pod may take its room in any cycle: it waits


def test_a_gang_kube_scheduler_asks_about_is_queued_while_the_backlog_is_full():
    """At 5,000 nodes on 1.26 every gang whose first member kube-scheduler popped was reserved at once, however many
    members were still waiting to be bound: reserved -> bound p50 was 12 s, GPUs held idle meanwhile."""
    service = direct_service(cpu_nodes(4), backlog_limit=2)  # `meshfit serve --bind-backlog 2`
    watch(service, [cpu_pod("early")])  # fences the first gang's members for a while
    first, second = gang("a", 2), gang("b", 2)
    watch(service, first + second)
    filter_nodes(service.filter(first[0]))  # a is reserved: a-0 told its node, a-1 nominated and held
    assert service.scheduler.direct.bind_backlog() == 2
    reply = service.filter(second[0])
    assert filter_nodes(reply) == [] and service.state.ledger.get("default/b") is None
    assert "waits while meshfit binds" in str(reply["FailedNodes"])
    service.clock.advance(2.5)
    service.scheduler.tick()  # a-1 passes the fence and binds; a-0 is kube-scheduler's
    assert service.scheduler.bind("default", "a-0", first[0]["metadata"]["uid"],
                                  service.state.ledger.get("default/a").node_of(0)) == ""
    for pod in first:  # the watch reports a bound: the backlog is empty
        pod["spec"]["nodeName"] = service.state.ledger.get("default/a").node_of(int(pod["metadata"]["name"][-1]))
        watch(service, [pod])
    service.scheduler.tick()
    assert service.state.ledger.get("default/b") is not None  # reserved by the queue as a was bound


def test_a_member_bound_at_once_waits_for_a_pod_of_higher_priority_that_arrives_before_its_binding():
    """Without a nomination a member is bound at once when nothing races it -- but a pod of higher priority that
    appears while it waits for its gang (a pod not created yet) may take its room in any cycle: it is nominated and
    fenced then, and not bound while that pod is pending."""
    service = direct_service(cpu_nodes(3))
    pods = gang("g", 3)[:2]  # its third pod is not created yet: the gang waits (`MISSING_GRACE_SECONDS`)
    watch(service, pods)
    filter_nodes(service.filter(pods[0]))
    service.scheduler.tick()
    assert service.binder.calls == [] and service.scheduler.direct.nominator.calls == []  # ready, not nominated
    watch(service, [cpu_pod("urgent", priority=1000)])
    service.clock.advance(3.5)  # past the grace: g-1 would bind into its slot alone now
    service.scheduler.tick()
    assert service.binder.calls == []  # the urgent pod may take its room in any cycle: it waits
    assert [call[1] for call in service.scheduler.direct.nominator.calls] == ["g-1"]
