"""meshfit's gang queue and lifecycle in process: order, backfill, prompt requeues, rollback, races, restart."""

from __future__ import annotations

from scheduler.service.lifecycle.actions import MemoryActions
from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_pod, make_service


def prioritized(pod: dict, priority: int) -> dict:
    """`pod` with `spec.priority` set (what PriorityClass admission writes)."""
    pod["spec"]["priority"] = priority
    return pod


def service_with(nodes: int = 8, **options):
    """A service over `nodes` 8-GPU nodes in one rack, with recorded actions run inline."""
    actions = MemoryActions()
    service = make_service(make_nodes(racks=1, nodes_per_rack=nodes), actions=actions, synchronous_actions=True,
                           **options)
    return service, actions


def bind_gang(service, name: str, size: int, gpus: int = 8) -> list[dict]:
    """Filter and bind every member of a gang; returns the pods."""
    pods = [gang_pod(name, i, size, gpus) for i in range(size)]
    for pod in pods:
        service.state.upsert_pod(pod)
    for pod in pods:
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    return pods


def delete_gang(service, pods: list[dict]) -> None:
    """Every member deleted (the job finished)."""
    for pod in pods:
        service.state.delete_pod("default", pod["metadata"]["name"])


def gang_rows(service) -> dict[str, dict]:
    """`GET /gangs` by gang key."""
    return {row["gang"]: row for row in service.client.get("/gangs").json()["gangs"]}


def test_a_big_gang_is_not_starved_by_a_stream_of_small_ones():
    service, _ = service_with(nodes=8)
    old = bind_gang(service, "old", 6)  # 2 of 8 nodes free
    big = gang_pod("big", 0, 4)
    assert filter_nodes(service.filter(big)) == []  # needs 4 whole nodes: waits, head of the queue
    for i in range(3):  # each would fit on the 2 free nodes, but takes whole nodes the head waits for
        small = gang_pod(f"small{i}", 0, 1)
        reply = service.filter(small)
        assert filter_nodes(reply) == [] and "waits behind gang default/big" in next(iter(reply["FailedNodes"].values()))
    rows = gang_rows(service)
    assert [rows[k]["position"] for k in ("default/big", "default/small0", "default/small2")] == [1, 2, 4]
    delete_gang(service, old)
    service.scheduler.tick()  # capacity freed: the queue is re-evaluated in order
    rows = gang_rows(service)
    assert rows["default/big"]["state"] == "reserved"
    assert all(rows[f"default/small{i}"]["state"] == "reserved" for i in range(3))  # 8 - 4 nodes left: all fit


def test_backfill_that_costs_the_head_nothing_goes_first():
    running = [make_pod(f"run{i}", 4, node=f"n-0-{i}", phase="Running") for i in range(3)]
    service, _ = service_with(nodes=4, pods=running)  # three nodes half used, one node whole
    assert filter_nodes(service.filter(gang_pod("big", 0, 2))) == []  # two whole nodes: only one exists
    half = gang_pod("half", 0, 1, gpus=4)  # fits in a half-used node: the head loses no slot
    assert len(filter_nodes(service.filter(half))) == 1
    whole = gang_pod("whole", 0, 1, gpus=8)  # would take the one whole node the head needs
    assert filter_nodes(service.filter(whole)) == []


def test_higher_priority_goes_ahead_of_earlier_arrivals():
    service, _ = service_with(nodes=4)
    old = bind_gang(service, "old", 4)
    service.filter(gang_pod("early", 0, 2))
    service.filter(prioritized(gang_pod("urgent", 0, 3), 100))
    assert [r["gang"] for r in service.client.get("/gangs").json()["gangs"][:2]] == ["default/urgent", "default/early"]
    delete_gang(service, old)
    service.scheduler.tick()
    rows = gang_rows(service)
    assert rows["default/urgent"]["state"] == "reserved" and rows["default/early"]["state"] == "waiting"


def test_members_turned_away_are_requeued_with_their_node_when_the_gang_is_reserved():
    service, actions = service_with(nodes=4)
    old = bind_gang(service, "old", 4)
    pods = [gang_pod("next", i, 2) for i in range(2)]
    for pod in pods:
        assert filter_nodes(service.filter(pod)) == []
    delete_gang(service, old)
    service.scheduler.tick()
    entry = service.state.ledger.get("default/next")
    requeued = {(c.pod.name, c.detail) for c in actions.of("requeue")}
    assert requeued == {(f"next-{i}", entry.node_of(i)) for i in range(2)}
    assert {c.reason for c in actions.of("event") if c.pod.name == "next-0"} == {"GangWaiting"}  # GangReserved held
    service.clock.advance(5.0)
    service.scheduler.tick()  # still not bound 5 s later: the gang's GangReserved Event is written
    assert {c.reason for c in actions.of("event") if c.pod.name == "next-0"} >= {"GangWaiting", "GangReserved"}


def test_a_member_never_seen_again_is_requeued_with_backoff():
    service, actions = service_with(nodes=4)
    pods = [gang_pod("g", i, 2) for i in range(2)]
    service.state.upsert_pod(pods[1])
    assert filter_nodes(service.filter(pods[0]))  # reserves the gang; member 1 is known but never filtered
    times = []
    for _ in range(40):
        service.clock.advance(1.0)
        before = len(actions.of("requeue"))
        service.scheduler.tick()
        if len(actions.of("requeue")) > before:
            times.append(service.clock.now)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times and gaps == sorted(gaps) and gaps[-1] > gaps[0]  # 2 s, 4 s, 8 s, 16 s...


def test_a_gang_stuck_partly_bound_is_rolled_back_whole():
    service, actions = service_with(nodes=4, completion_timeout=60.0)
    pods = [gang_pod("g", i, 2) for i in range(2)]
    service.state.upsert_pod(pods[1])
    [node] = filter_nodes(service.filter(pods[0]))
    assert service.bind(pods[0], node) == {"Error": ""}
    service.clock.advance(30.0)
    service.scheduler.tick()
    assert not actions.of("evict") and service.state.ledger.get("default/g").slots[1].state == "reserved"
    service.clock.advance(31.0)
    service.scheduler.tick()
    assert [c.pod.name for c in actions.of("evict")] == ["g-0"]
    assert gang_rows(service)["default/g"]["state"] == "rolling-back"
    scrape = service.client.get("/metrics")  # the metrics answer in the rolled-back state too
    assert scrape.status_code == 200 and 'meshfit_gang_queue{state="rolling-back"} 1.0' in scrape.text
    reply = service.filter(pods[1])  # not placed next to the doomed member
    assert filter_nodes(reply) == [] and "rolled back" in next(iter(reply["FailedNodes"].values()))
    service.state.delete_pod("default", "g-0")  # the eviction lands
    service.scheduler.tick()
    assert filter_nodes(service.filter(pods[1]))  # placed afresh, whole


def test_a_ttl_sweep_during_a_bind_cannot_free_the_slot():
    service, _ = service_with(nodes=2, ttl=10.0)
    pods = [gang_pod("g", i, 2) for i in range(2)]
    [node] = filter_nodes(service.filter(pods[0]))
    real_bind = service.binder.bind

    def slow_bind(*args):
        service.clock.advance(11.0)  # the reservation's TTL passes while the Binding call is in flight
        assert service.scheduler.sweep() == []
        real_bind(*args)

    service.scheduler.binder.bind = slow_bind
    assert service.bind(pods[0], node) == {"Error": ""}
    other = gang_pod("other", 0, 2)
    assert filter_nodes(service.filter(other)) == []  # both nodes still held by g: nothing double-booked
    service.state.topology.check_invariants()


def test_a_failed_bind_leaves_the_slot_held_and_the_pod_unannotated():
    service, _ = service_with(nodes=2)
    pods = [gang_pod("g", i, 2) for i in range(2)]
    [node] = filter_nodes(service.filter(pods[0]))

    def failing_bind(*args):
        raise RuntimeError("HTTP 500 from the API server")

    service.scheduler.binder.bind = failing_bind
    assert "HTTP 500" in service.bind(pods[0], node)["Error"]
    slot = service.state.ledger.get("default/g").slots[0]
    assert (slot.state, slot.node) == ("reserved", node)
    assert service.state.pod("default", "g-0").node is None


def test_a_restart_re_holds_missing_members_before_any_filter():
    bound = [gang_pod("g", i, 4, node=f"n-0-{i}", phase="Running") for i in range(2)]
    pending = gang_pod("g", 2, 4)
    pending["status"]["nominatedNodeName"] = "n-0-5"
    service = make_service(make_nodes(racks=1, nodes_per_rack=8), pods=[*bound, pending], rebuild=True)
    entry = service.state.ledger.get("default/g")
    assert entry.missing_indices() == [] and entry.node_of(2) == "n-0-5"
    scrape = service.client.get("/metrics")  # and right after a restart
    assert scrape.status_code == 200 and 'meshfit_gang_queue{state="binding"} 1.0' in scrape.text
    intruder = gang_pod("intruder", 0, 6)  # 8 nodes, 4 held by g: a 6-node gang cannot take g's slots
    assert filter_nodes(service.filter(intruder)) == []
    service.state.topology.check_invariants()


def test_the_queue_and_the_waits_are_in_the_metrics():
    service, _ = service_with(nodes=4, preemption=False)  # the urgent gang waits rather than preempting
    old = bind_gang(service, "old", 4)
    service.filter(prioritized(gang_pod("urgent", 0, 2), 100))
    service.filter(gang_pod("early", 0, 2))
    text = service.client.get("/metrics").text
    assert 'meshfit_gang_queue{state="waiting"} 2.0' in text and 'meshfit_gang_queue{state="bound"} 1.0' in text
    assert 'meshfit_gangs_waiting{priority="100"} 1.0' in text and 'meshfit_gangs_waiting{priority="0"} 1.0' in text
    service.clock.advance(40.0)
    delete_gang(service, old)
    service.scheduler.tick()
    text = service.client.get("/metrics").text
    assert 'meshfit_gang_wait_seconds_bucket{le="60.0",until="reserved"} 3.0' in text  # old at 0 s, then both at 40 s
    assert 'meshfit_gang_wait_seconds_bucket{le="30.0",until="reserved"} 1.0' in text


def test_in_kubernetes_mode_a_forged_body_selects_but_never_overwrites():
    bound = gang_pod("g", 0, 1, node="n-0-0", phase="Running")
    service, _ = service_with(nodes=2, pods=[bound])
    service.state.watch_is_truth = True
    free = service.state.topology.gpus_free
    forged = gang_pod("g", 0, 1, uid="forged-uid")  # the bound pod's name, another uid, unbound
    reply = service.filter(forged)
    assert "does not match the pod the API server has" in reply["Error"]
    other = make_pod("other", 8, uid=bound["metadata"]["uid"])  # the bound pod's uid under another name
    assert "does not match" in service.filter(other)["Error"]
    assert service.state.topology.gpus_free == free and service.state.pod("default", "g-0").node == "n-0-0"
    fresh = gang_pod("h", 0, 1)  # not yet reported by the watch, but the API server has it: one GET, then placed
    lookups = []
    service.state.pod_lookup = lambda ns, name: lookups.append(name) or (fresh if name == "h-0" else None)
    assert filter_nodes(service.filter(fresh)) and lookups == ["h-0"]
    assert service.state.pod("default", "h-0").from_watch


def test_in_kubernetes_mode_a_request_for_a_pod_that_does_not_exist_reserves_nothing():
    service, _ = service_with(nodes=2)
    service.state.watch_is_truth = True
    lookups = []
    service.state.pod_lookup = lambda ns, name: lookups.append(name)  # the API server has no such pod
    free = service.state.topology.gpus_free
    ghost = gang_pod("ghost", 0, 2)  # an unauthenticated body for a pod that was never created
    for _ in range(3):
        reply = service.filter(ghost)
        assert "does not exist in the API server" in reply["Error"] and filter_nodes(reply) == []
    assert lookups == ["ghost-0"]  # one GET; the miss is remembered for a second
    assert service.state.ledger.entries == {} and service.state.topology.gpus_free == free
    assert service.state.pod("default", "ghost-0") is None  # no state at all
    service.clock.advance(5)
    real = gang_pod("g", 0, 1)
    service.state.upsert_pod(real)  # a real pod, from the watch, gets the room
    assert filter_nodes(service.filter(real))


def test_a_partly_bound_gang_short_of_room_heads_the_queue():
    bound = [gang_pod("g", i, 4, node=f"n-0-{i}", phase="Running") for i in range(2)]
    running = [make_pod(f"run{i}", 8, node=f"n-0-{i + 2}", phase="Running") for i in range(2)]
    pending = [gang_pod("g", i, 4) for i in (2, 3)]
    service = make_service(make_nodes(racks=1, nodes_per_rack=5), pods=[*bound, *running, *pending], rebuild=True)
    service.scheduler.tick()  # 1 free node for 2 missing members: it waits, first in line
    [row] = [r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/g"]
    assert row["state"] == "waiting" and row["position"] == 1
    assert filter_nodes(service.filter(gang_pod("small", 0, 1))) == []  # would take the node g needs
    service.state.delete_pod("default", "run0")
    service.scheduler.tick()
    assert service.state.ledger.get("default/g").missing_indices() == []


def test_best_effort_backfill_starts_a_later_gang_whenever_it_fits():
    """`--backfill best-effort` (kube-scheduler's queue, Kueue's BestEffortFIFO): the scenario above, no head."""
    service, _ = service_with(nodes=8, backfill="best-effort")
    bind_gang(service, "old", 6)
    assert filter_nodes(service.filter(gang_pod("big", 0, 4))) == []  # still does not fit: 2 nodes free
    small = gang_pod("small0", 0, 1)
    [node] = filter_nodes(service.filter(small))  # fits: started although the big gang waits
    assert service.bind(small, node) == {"Error": ""}
    assert gang_rows(service)["default/big"]["state"] == "waiting"


def test_the_group_cycle_defaults_to_best_effort_and_the_extender_to_easy_unless_chosen():
    from scheduler.gangs.queue import backfill_rule
    assert (backfill_rule(None, True), backfill_rule(None, False)) == ("best-effort", "easy")
    assert (backfill_rule("easy", True), backfill_rule("best-effort", False)) == ("easy", "best-effort")


def test_an_unknown_backfill_rule_is_refused():
    import pytest
    from scheduler.gangs.queue import GangQueue
    with pytest.raises(ValueError, match="backfill must be one of easy, best-effort"):
        GangQueue(backfill="greedy")


def test_pods_known_only_from_requests_are_bounded():
    service, _ = service_with(nodes=2)
    service.state.max_request_only_pods = 50
    for i in range(200):
        service.filter(make_pod(f"p{i}", 1))
    assert len(service.state.pods) == 50 and service.state.pod("default", "p199") is not None
    assert service.state.pod("default", "p0") is None
    service.state.topology.check_invariants()


def test_a_gang_kube_scheduler_never_asked_about_is_queued_from_the_watch():
    service, actions = service_with(nodes=5)
    old = bind_gang(service, "old", 4)  # one node left: the 2-node gang does not fit
    for pod in (gang_pod("unasked", i, 2) for i in range(2)):  # the watch reports them; no filter ever comes
        pod["spec"]["schedulerName"] = "meshfit"
        service.state.upsert_pod(pod)
    service.scheduler.tick()
    assert "default/unasked" not in gang_rows(service)  # kube-scheduler may still be on its way
    service.clock.advance(4.0)
    service.scheduler.tick()
    assert gang_rows(service)["default/unasked"]["state"] == "waiting"
    reply = service.filter(gang_pod("late", 0, 1))  # fits on the free node, but arrived later: behind it
    assert filter_nodes(reply) == [] and "waits behind gang default/unasked" in next(iter(reply["FailedNodes"].values()))
    delete_gang(service, old)
    service.scheduler.tick()
    assert gang_rows(service)["default/unasked"]["state"] == "reserved"
    assert {c.pod.name for c in actions.of("requeue")} >= {"unasked-0", "unasked-1"}  # brought to kube-scheduler


def test_a_member_lost_hours_into_a_whole_gang_gets_the_full_completion_timeout():
    service, actions = service_with(nodes=4, completion_timeout=60.0)
    pods = bind_gang(service, "g", 2, gpus=2)
    service.clock.advance(3600.0)  # the gang has run whole for an hour
    service.scheduler.tick()
    service.state.delete_pod("default", pods[1]["metadata"]["name"])  # a member dies; its controller recreates it
    service.clock.advance(1.0)
    service.scheduler.tick()
    assert not actions.of("evict")  # not rolled back at once: the deadline counts from the loss
    service.clock.advance(61.0)
    service.scheduler.tick()
    assert [c.pod.name for c in actions.of("evict")] == [pods[0]["metadata"]["name"]]  # still enforced


def test_a_typo_in_a_meshfit_key_keeps_the_gang_waiting_visibly_once(caplog):
    service, actions = service_with(nodes=2)
    pod = gang_pod("g", 0, 1)
    pod["metadata"]["annotations"]["meshfit.io/paralellism"] = "tp=8"
    service.state.upsert_pod(pod)
    with caplog.at_level("WARNING", logger="meshfit.gang"):
        for _ in range(3):  # kube-scheduler retries: one Event and one log line, not three
            reply = service.filter(pod)
            assert "did you mean meshfit.io/parallelism" in reply["Error"]
    events = [c for c in actions.of("event") if c.reason == "GangSpecInvalid"]
    assert len(events) == 1 and "meshfit.io/paralellism" in events[0].detail
    assert caplog.text.count("not placed") == 1
    assert service.state.ledger.entries == {}


def test_a_waiting_members_refusal_text_stays_put_while_only_its_numbers_move():
    service, _ = service_with(nodes=2)
    pod = gang_pod("big", 0, 3)
    first = service.filter(pod)["FailedNodes"]
    assert "does not fit" in next(iter(first.values()))
    single = make_pod("one", 1)
    node = filter_nodes(service.filter(single))[0]
    assert service.bind(single, node) == {"Error": ""}  # free GPUs change: the detailed reason would too
    again = service.filter(pod)["FailedNodes"]
    assert again == first  # kube-scheduler sees the same text: no pod-status patch per retry
    [row] = [r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/big"]
    assert "does not fit" in row["reason"]  # the moving details stay readable where they are asked for
