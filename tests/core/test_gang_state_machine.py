"""The gang state machine: phases derived from the ledger, named transitions, listeners, and nothing unexpected."""

from __future__ import annotations

import pytest

from scheduler.gangs.lifecycle import TRANSITIONS, GangStateMachine, Phase, phase_of
from scheduler.service.lifecycle.actions import MemoryActions

from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_service


def test_every_phase_but_gone_can_be_left_and_every_transition_has_a_name():
    reachable_from = {before for before, _ in TRANSITIONS}
    assert set(Phase) <= reachable_from
    assert all(name and name != "unexpected" for name in TRANSITIONS.values())
    assert (Phase.WAITING, Phase.BOUND) not in TRANSITIONS  # a gang is reserved before any member binds


def test_listeners_run_on_their_transition_and_a_jump_the_table_forbids_is_recorded():
    machine, seen = GangStateMachine(), []
    machine.on("reserved", lambda key, before, after: seen.append((key, before, after)))
    assert machine.observe("ns/g", Phase.WAITING) == "queued"
    assert machine.observe("ns/g", Phase.RESERVED) == "reserved"
    assert machine.observe("ns/g", Phase.RESERVED) is None
    assert seen == [("ns/g", Phase.WAITING, Phase.RESERVED)]
    assert machine.observe("ns/h", Phase.WAITING) == "queued"
    assert machine.observe("ns/h", Phase.BOUND) == "unexpected" and machine.unexpected == [
        ("ns/h", Phase.WAITING, Phase.BOUND)]
    with pytest.raises(ValueError, match="no transition named"):
        machine.on("teleported", lambda *a: None)


def test_a_gang_goes_waiting_reserved_binding_bound_rolled_back_and_back_without_surprises():
    service = make_service(make_nodes(racks=1, nodes_per_rack=4), actions=MemoryActions(), synchronous_actions=True,
                           completion_timeout=30)
    lifecycle = service.scheduler.lifecycle
    pods = [gang_pod("g", i, 3) for i in range(3)]
    [node] = filter_nodes(service.filter(pods[0]))
    assert lifecycle.machine.phase("default/g") == Phase.RESERVED
    assert service.bind(pods[0], node) == {"Error": ""}
    service.scheduler.tick()
    assert lifecycle.machine.phase("default/g") == Phase.BINDING  # one bound, the others still to come
    service.clock.advance(31)
    service.scheduler.tick()  # never completed: rolled back whole
    assert lifecycle.machine.phase("default/g") == Phase.ROLLING_BACK
    service.state.delete_pod("default", "g-0")
    service.scheduler.tick()
    assert lifecycle.machine.phase("default/g") in (Phase.GONE, Phase.WAITING, Phase.RESERVED)
    assert lifecycle.machine.unexpected == []
    assert lifecycle.machine.counts["rolled-back"] == 1 and lifecycle.machine.counts["reserved"] >= 1


def test_phase_of_reads_the_ledger():
    assert phase_of(None, rolling_back=False, waiting=False) == Phase.GONE
    assert phase_of(None, rolling_back=False, waiting=True) == Phase.WAITING
    assert phase_of(None, rolling_back=True, waiting=True) == Phase.ROLLING_BACK


def test_a_gang_rebuilt_by_a_relist_and_rolled_back_at_once_is_restored_first():
    """Soak finding: a new leader rolled back (or preempted) gangs it had rebuilt from its re-list before its periodic
    pass ever recorded them: gone -> rolling-back, which the table does not allow."""
    bound = [gang_pod("g", i, 3, node=f"n-0-{i}", phase="Running") for i in range(2)]  # pod 2 never came
    service = make_service(make_nodes(racks=1, nodes_per_rack=4), pods=bound, rebuild=True, actions=MemoryActions(),
                           synchronous_actions=True, completion_timeout=30)
    service.clock.advance(31)
    service.scheduler.tick()  # the first pass of the new leader rolls it back
    machine = service.scheduler.lifecycle.machine
    assert machine.counts["rolled-back"] == 1 and machine.counts["restored"] == 1
    assert machine.unexpected == []
