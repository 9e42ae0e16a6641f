"""A gang's GangReserved Event is held back: one GangBound Event for a gang bound promptly, both in order otherwise."""

from __future__ import annotations

from scheduler.service.lifecycle.actions import ActionDispatcher, MemoryActions, PodRef
from scheduler.service.lifecycle.gang_notices import RESERVED_NOTICE_SECONDS, ReservedNotices
from tests.service.helpers import FakeClock, filter_nodes, gang_pod
from tests.service.test_gang_lifecycle import bind_gang, service_with


def gang_events(actions: MemoryActions) -> list[tuple[str, str]]:
    """(reason, message) of every Event recorded, in order."""
    return [(c.reason, c.detail) for c in actions.of("event")]


def test_a_gang_bound_promptly_gets_one_event_that_says_where_it_was_reserved():
    service, actions = service_with(nodes=4)
    bind_gang(service, "quick", 2)
    service.scheduler.tick()
    service.clock.advance(RESERVED_NOTICE_SECONDS + 1)
    service.scheduler.tick()
    events = gang_events(actions)
    assert [reason for reason, _ in events] == ["GangBound"], events
    assert "all 2 pods bound" in events[0][1] and "2 pods x 8 GPUs reserved on 2 node(s)" in events[0][1]


def test_a_gang_not_bound_in_time_gets_its_reserved_event_then_a_plain_bound_event():
    service, actions = service_with(nodes=4)
    pods = [gang_pod("slow", i, 2) for i in range(2)]
    for pod in pods:
        service.state.upsert_pod(pod)
    [node] = filter_nodes(service.filter(pods[0]))
    assert service.bind(pods[0], node) == {"Error": ""}
    service.clock.advance(RESERVED_NOTICE_SECONDS - 1)
    service.scheduler.tick()
    assert gang_events(actions) == []  # held: the gang may still be bound promptly
    service.clock.advance(1.0)
    service.scheduler.tick()
    service.scheduler.tick()
    [(reason, message)] = gang_events(actions)
    assert reason == "GangReserved" and "not every pod is bound yet" in message, message
    [node] = filter_nodes(service.filter(pods[1]))
    assert service.bind(pods[1], node) == {"Error": ""}
    reasons = [reason for reason, _ in gang_events(actions)]
    assert reasons == ["GangReserved", "GangBound"]
    assert "reserved on" not in gang_events(actions)[1][1]  # said already


def test_a_held_notice_is_written_before_any_other_event_about_the_gang():
    clock, actions = FakeClock(), MemoryActions()
    notices = ReservedNotices(ActionDispatcher(actions, synchronous=True), clock)
    ref = PodRef("default", "g-0", "u0")
    notices.hold("default/g", ref, "2 pods x 8 GPUs reserved on 1 node(s) (queue)")
    clock.advance(0.5)
    notices.flush("default/g")  # e.g. released or rolled back now
    notices.flush("default/g")  # once only
    [(reason, message)] = gang_events(actions)
    assert reason == "GangReserved" and message.startswith("gang default/g: 2 pods x 8 GPUs") and "0.5 s ago" in message
    assert notices.bound("default/g") == ""  # nothing held any more
    notices.hold("default/g", ref, "first")
    notices.hold("default/g", ref, "second")  # reserved again before the first was told: the first is written
    assert [m for _, m in gang_events(actions)][-1] == "gang default/g: first"
    assert notices.write_due() == 0 and "second" in notices.bound("default/g")


def test_a_released_gang_tells_its_reservation_before_the_release():
    service, actions = service_with(nodes=4)
    pods = [gang_pod("short", i, 2) for i in range(2)]
    for pod in pods:
        service.state.upsert_pod(pod)
    assert filter_nodes(service.filter(pods[0]))
    service.scheduler.lifecycle.release("default/short", "gang default/short: released for the test")
    reasons = [reason for reason, _ in gang_events(actions)]
    assert reasons[:2] == ["GangReserved", "GangReleased"], reasons
