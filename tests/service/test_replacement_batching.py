"""Failure replacement batches failures that come close together: one restart and one report for both."""

from __future__ import annotations

from tests.service.test_replacement import bind_gang, events, evicted, fail_not_ready, node_dict, service_with


def test_nodes_failing_close_together_are_replaced_as_one():
    service, actions = service_with(racks=2, per_rack=6, grace_seconds=1.0)
    placed = bind_gang(service, "g", 4)
    fail_not_ready(service, placed[1])
    service.clock.advance(0.5)
    fail_not_ready(service, placed[3])  # half a second later
    service.clock.advance(0.7)
    service.scheduler.tick()  # the first past its grace, the second not yet: wait for it
    assert evicted(actions) == []
    service.clock.advance(0.4)
    service.scheduler.tick()
    assert sorted(evicted(actions)) == ["g-1", "g-3"]
    [message] = events(actions, "GangMembersReplaced")  # one restart, one report
    assert f"{placed[1]} -> " in message and f"{placed[3]} -> " in message


def test_waiting_for_a_second_failure_ends_after_one_more_grace_or_when_it_recovers():
    service, actions = service_with(racks=2, per_rack=6, grace_seconds=1.0)
    placed = bind_gang(service, "g", 4)
    fail_not_ready(service, placed[1])
    service.clock.advance(1.9)
    fail_not_ready(service, placed[3])
    service.scheduler.tick()
    assert evicted(actions) == []
    service.clock.advance(0.1)  # two graces since the first failure: no more waiting
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]
    service.clock.advance(1.0)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1", "g-3"]
    assert len(events(actions, "GangMembersReplaced")) == 2
    other, other_actions = service_with(racks=2, per_rack=6, grace_seconds=1.0)
    placed = bind_gang(other, "g", 4)
    healthy = node_dict(other, placed[3])
    fail_not_ready(other, placed[1])
    other.clock.advance(0.5)
    fail_not_ready(other, placed[3])
    other.clock.advance(0.6)
    other.scheduler.tick()
    assert evicted(other_actions) == []
    other.state.upsert_node(healthy)  # the second node comes back: replace the first now
    other.scheduler.tick()
    assert evicted(other_actions) == ["g-1"]
