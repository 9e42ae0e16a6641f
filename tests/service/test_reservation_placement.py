"""`reservation_placement` (what bind annotations and rank tables are built from) equals rebuilding the
ranks from scratch, whether it reuses the entry's ranks or not."""

from __future__ import annotations

import pytest

from scheduler.placement.engine import build_ranks, place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot
from scheduler.gangs.reserve_ops import reserve_remaining
from scheduler.gangs.ledger import ReservationLedger
from scheduler.service.binding.binder import reservation_placement
from tests.builders import make_cluster
from tests.service.helpers import FakeClock


def reserved(parallelism: str, pods: int, order: str = "tp-cp-ep-dp-pp"):
    """(ledger, entry, topology) of a first-fit gang reserved on a 16-node cluster."""
    topo = make_cluster(nodes=16)
    par = Parallelism.parse(parallelism)
    gang = Gang("team", "llm", tuple(PodSlot(i, f"llm-{i}", par.world_size // pods) for i in range(pods)), par,
                rank_order=order)
    ledger = ReservationLedger(topo, 60.0, FakeClock())
    return ledger, ledger.reserve(place(gang, topo, "first-fit")), topo


def from_scratch(entry) -> list:
    """The ranks rebuilt the slow way from the entry as it stands."""
    view = reservation_placement(entry)
    return build_ranks(view.gang, [entry.node_of(i) or "" for i in range(len(entry.gang.pods))], view.rank_order)


def bind_first(ledger, entry, topo) -> None:
    """Pod 0 binds under another name (the pod's real name)."""
    ledger.mark_bound(entry.gang_key, 0, "llm-real-0", entry.node_of(0))


def bind_then_replace_the_rest(ledger, entry, topo) -> None:
    """Pod 0 binds; the others lose their slots and are reserved again next to it."""
    bind_first(ledger, entry, topo)
    for index in range(1, len(entry.gang.pods)):
        ledger.release_slot(entry.gang_key, index)
    placement, reason = reserve_remaining(ledger, entry, topo, "first-fit")
    assert placement is not None, reason


@pytest.mark.parametrize("history", [lambda *_: None, bind_first, bind_then_replace_the_rest],
                         ids=["just-reserved", "one-bound-renamed", "rest-re-reserved"])
@pytest.mark.parametrize("parallelism,pods,order", [
    ("tp=8,dp=4", 4, "tp-cp-ep-dp-pp"),
    ("tp=4,pp=2,dp=4", 4, "tp-cp-ep-pp-dp"),
], ids=["tp-dp", "tp-pp-dp"])
def test_reservation_ranks_equal_ranks_built_from_scratch(history, parallelism, pods, order):
    ledger, entry, topo = reserved(parallelism, pods, order)
    history(ledger, entry, topo)
    view = reservation_placement(entry)
    assert view.ranks == from_scratch(entry)
    assert [pod.name for pod in view.gang.pods] == [entry.slots[i].pod or f"llm-{i}" for i in range(pods)]
    assert view.pod_nodes == [entry.node_of(i) for i in range(pods)]
