"""Reservation TTLs: `ReservationLedger.expire` skips its scan until a deadline can have passed, and
expires exactly the gangs a full scan would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement.jobs import Gang, Parallelism, PodSlot
from scheduler.placement.result import PLACED, Placement
from scheduler.gangs.ledger import SLOT_BOUND, ReservationLedger, reservation_key
from tests.builders import make_cluster
from tests.service.helpers import FakeClock

GANGS = [f"team/g{i}" for i in range(4)]


def two_pod_placement(key: str, nodes: list[str]) -> Placement:
    """A placed gang of two 8-GPU pods on `nodes`."""
    namespace, name = key.split("/")
    gang = Gang(namespace, name, (PodSlot(0, f"{name}-0", 8), PodSlot(1, f"{name}-1", 8)), Parallelism(tp=8, dp=2))
    return Placement(gang, PLACED, "test", "tp-cp-ep-dp-pp", None, nodes)


def due_by_full_scan(ledger: ReservationLedger, now: float) -> list[str]:
    """What expiring means, written as the plain scan: held slots, nothing bound, a deadline not after `now`."""
    return [key for key, entry in ledger.entries.items()
            if entry.expires_at is not None and entry.expires_at <= now and entry.reserved_slots()
            and not any(slot.state == SLOT_BOUND for slot in entry.slots.values())]


OPERATIONS = st.lists(st.tuples(st.sampled_from(["reserve", "bind", "release", "delete", "unreserve", "advance"]),
                                st.sampled_from(GANGS), st.integers(0, 1), st.floats(0, 90)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS, ttl=st.sampled_from([10.0, 60.0]))
def test_expire_matches_a_full_scan_after_any_history(operations, ttl):
    topo, clock = make_cluster(nodes=16), FakeClock()
    ledger = ReservationLedger(topo, ttl, clock)
    names = [node.name for node in topo.nodes]
    for step, (op, key, index, seconds) in enumerate(operations):
        if op == "reserve" and (ledger.get(key) is None or ledger.get(key).missing_indices()):
            entry = ledger.get(key)
            nodes = names[2 * GANGS.index(key):2 * GANGS.index(key) + 2]
            ledger.reserve(two_pod_placement(key, nodes), entry.missing_indices() if entry else None)
        elif op == "bind" and ledger.get(key) is not None and index in ledger.get(key).slots:
            ledger.mark_bound(key, index, f"{key}-{index}", ledger.get(key).slots[index].node)
        elif op == "release":
            ledger.release_slot(key, index)
        elif op == "delete":
            ledger.hold_for_replacement(key, index)
        elif op == "unreserve":
            ledger.unreserve(key)
        elif op == "advance":
            clock.advance(seconds)
        expected = sorted(due_by_full_scan(ledger, clock.now))
        assert sorted(ledger.expire()) == expected, f"step {step}: {op} {key}"
        assert due_by_full_scan(ledger, clock.now) == []


def test_a_gang_whose_slots_all_bound_never_expires():
    topo, clock = make_cluster(nodes=4), FakeClock()
    ledger = ReservationLedger(topo, 10.0, clock)
    entry = ledger.reserve(two_pod_placement("team/g0", [topo.nodes[0].name, topo.nodes[1].name]))
    for slot in list(entry.slots.values()):
        ledger.mark_bound("team/g0", slot.index, f"g0-{slot.index}", slot.node)
    clock.advance(11.0)
    assert ledger.expire() == [] and ledger.get("team/g0").status == SLOT_BOUND


def test_reserving_again_pushes_the_deadline_back():
    topo, clock = make_cluster(nodes=4), FakeClock()
    ledger = ReservationLedger(topo, 10.0, clock)
    nodes = [topo.nodes[0].name, topo.nodes[1].name]
    ledger.reserve(two_pod_placement("team/g0", nodes))
    clock.advance(6.0)
    ledger.release_slot("team/g0", 1)
    ledger.reserve(two_pod_placement("team/g0", nodes), [1])  # deadline now 16 s after the start
    clock.advance(6.0)
    assert ledger.expire() == []
    clock.advance(4.0)
    assert ledger.expire() == ["team/g0"] and ledger.get("team/g0") is None


def test_a_gang_with_a_bound_member_is_never_released_by_its_ttl():
    topo, clock = make_cluster(nodes=4), FakeClock()
    ledger = ReservationLedger(topo, 10.0, clock)
    nodes = [topo.nodes[0].name, topo.nodes[1].name]
    ledger.reserve(two_pod_placement("team/g0", nodes))
    ledger.mark_bound("team/g0", 0, "g0-0", nodes[0])
    clock.advance(1000.0)
    assert ledger.expire() == []
    entry = ledger.get("team/g0")
    assert entry.status == "reserved" and [s.index for s in entry.reserved_slots()] == [1]
    assert topo.node_by_name[nodes[1]].gpus_free == 0  # pod 1's GPUs still held for it


def test_a_deleted_bound_member_keeps_its_node_for_the_replacement():
    topo, clock = make_cluster(nodes=4), FakeClock()
    ledger = ReservationLedger(topo, 10.0, clock)
    nodes = [topo.nodes[0].name, topo.nodes[1].name]
    ledger.reserve(two_pod_placement("team/g0", nodes))
    ledger.mark_bound("team/g0", 0, "g0-0", nodes[0])
    ledger.mark_bound("team/g0", 1, "g0-1", nodes[1])
    assert ledger.hold_for_replacement("team/g0", 1)  # the pod's own holding is gone (state drops it)
    slot = ledger.get("team/g0").slots[1]
    assert (slot.state, slot.node, slot.pod) == ("reserved", nodes[1], None)
    assert topo.pods[reservation_key("team/g0", 1)] == (topo.node_by_name[nodes[1]].index, 8)


def test_a_binding_slot_survives_expiry():
    topo, clock = make_cluster(nodes=4), FakeClock()
    ledger = ReservationLedger(topo, 10.0, clock)
    ledger.reserve(two_pod_placement("team/g0", [topo.nodes[0].name, topo.nodes[1].name]))
    assert ledger.mark_binding("team/g0", 0, "g0-0")
    clock.advance(11.0)
    assert ledger.expire() == [] and ledger.get("team/g0").slots[0].state == "binding"
    ledger.unmark_binding("team/g0", 0)  # bind failed: reserved again, TTL restarted from now
    clock.advance(9.0)
    assert ledger.expire() == []
    clock.advance(2.0)
    assert ledger.expire() == ["team/g0"]
