"""Place-and-reserve operations on the ledger (call them under `ClusterState.lock`).

`place_and_reserve` places a whole gang against the topology (whose free counts already exclude
every other reservation) and holds the result in one step.  `reserve_remaining` completes a gang
that is partly bound (after a restart, a TTL expiry, or a member pod deleted and recreated): its
missing members are placed as a sub-gang, first inside the smallest domain holding the bound ones,
then ever wider, so they stay as close to their peers as capacity allows.
"""

from __future__ import annotations

from scheduler.engine import place
from scheduler.jobs import Gang, Parallelism, PodSlot, TopologyConstraint
from scheduler.placement import PLACED, Placement
from scheduler.reservations import Reservation, ReservationLedger
from topology.model import ClusterTopology


def shortfall_reason(gang: Gang, topo: ClusterTopology, placement: Placement) -> str:
    """One line naming the gang and why it does not fit (the explainer's sentence when it has one)."""
    reason = placement.reason
    try:
        from scheduler.explain import unschedulable_reason

        reason = unschedulable_reason(gang, topo) or reason
    except ImportError:
        pass
    return (f"gang {gang.key} ({len(gang.pods)} pods x {gang.gpus_per_pod} GPUs) does not fit; "
            f"no member is placed until the whole gang fits: {reason}")


def place_and_reserve(ledger: ReservationLedger, gang: Gang, topo: ClusterTopology,
                      policy: str) -> tuple[Placement, Reservation | None]:
    """Place the whole gang; if it fits, hold every slot atomically and return the entry."""
    placement = place(gang, topo, policy)
    if not placement.placed:
        return placement, None
    return placement, ledger.reserve(placement)


def _candidate_constraints(entry: Reservation, topo: ClusterTopology) -> list[TopologyConstraint]:
    held = [topo.node_by_name[n].index for n in
            (entry.node_of(i) for i in range(len(entry.gang.pods))) if n in topo.node_by_name]
    constraints: list[TopologyConstraint] = []
    if held:
        deepest = topo.group_level(held)
        for level in range(deepest, -1, -1):
            constraints.append(TopologyConstraint(assigned_domains=(topo.domain_of(held[0], level).name,)))
    constraints.append(TopologyConstraint())
    return constraints


def reserve_remaining(ledger: ReservationLedger, entry: Reservation, topo: ClusterTopology,
                      policy: str) -> Placement | None:
    """Reserve the missing members of a partly held gang near the held ones; None if they do not fit."""
    gang = entry.gang
    missing = entry.missing_indices()
    if not missing:
        return entry.placement
    g = gang.gpus_per_pod
    pods = tuple(PodSlot(j, gang.pods[i].name, g) for j, i in enumerate(missing))
    last: Placement | None = None
    for constraint in _candidate_constraints(entry, topo):
        sub = Gang(gang.namespace, gang.name, pods, Parallelism(tp=g, dp=len(missing)),
                   constraint=constraint, priority=gang.priority)
        last = place(sub, topo, policy)
        if last.placed:
            break
    if last is None or not last.placed:
        return None
    nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
    for j, i in enumerate(missing):
        nodes[i] = last.pod_nodes[j]
    full = Placement(gang, PLACED, last.policy, gang.rank_order, None, nodes)
    ledger.reserve(full, missing)
    return full
