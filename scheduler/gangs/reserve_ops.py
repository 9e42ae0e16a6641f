"""Place-and-reserve operations on the ledger (call them under `ClusterState.lock`).

`place_and_reserve` places a whole gang against the topology (whose free counts already exclude
every other reservation) and holds the result in one step.  `reserve_remaining` completes a gang
that is partly bound (after a restart, a TTL expiry, or a member pod deleted and recreated): its
missing members are placed as a sub-gang, first inside the smallest domain holding the bound ones,
then ever wider, so they stay as close to their peers as capacity allows -- except pod 0, which
goes back to the master address the bound members were given (`pinned_master`).
"""

from __future__ import annotations

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot, TopologyConstraint
from scheduler.placement.result import PLACED, Placement
from scheduler.gangs.ledger import SLOT_BOUND, Reservation, ReservationLedger, reservation_key
from topology.model import ClusterTopology


def shortfall_reason(gang: Gang, topo: ClusterTopology, placement: Placement) -> str:
    """One line naming the gang and why it does not fit (the explainer's sentence when it has one)."""
    reason = placement.reason
    try:
        from scheduler.placement.explain import unschedulable_reason

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


def _candidate_constraints(entry: Reservation, topo: ClusterTopology,
                           pinned: str | None = None) -> list[TopologyConstraint]:
    nodes = [entry.node_of(i) for i in range(len(entry.gang.pods))] + [pinned]
    held = [topo.node_by_name[n].index for n in nodes if n in topo.node_by_name]
    constraints: list[TopologyConstraint] = []
    if held:
        deepest = topo.group_level(held)
        for level in range(deepest, -1, -1):
            constraints.append(TopologyConstraint(assigned_domains=(topo.domain_of(held[0], level).name,)))
    constraints.append(TopologyConstraint())
    return constraints


def pinned_master(entry: Reservation, topo: ClusterTopology) -> tuple[str | None, str]:
    """(node pod 0 must be reserved on, or None if it is free to go anywhere; "" or why it cannot be honoured).

    Once a member is bound with `meshfit.io/master-addr`, pod 0 (rank 0 hosts the rendezvous) must
    run on that node: a bound pod's annotations cannot be changed under its running process.  When
    the node no longer has room (or is gone, or cordoned) there is no consistent placement, so the
    remaining members are refused with that reason until room frees or the bound members are deleted.
    """
    gang, given = entry.gang, entry.bound_given()
    if given is None:
        return None, ""
    bound = sum(1 for slot in entry.slots.values() if slot.state == SLOT_BOUND)
    if entry.given_conflict:
        return None, f"gang {gang.key}: {entry.given_conflict}; delete the gang's pods to place it afresh"
    if given.parallelism != str(gang.parallelism):
        return None, (f"gang {gang.key}: its bound member(s) were given {given.describe()}, but the gang now "
                      f"declares parallelism {gang.parallelism}; delete the gang's pods to place it afresh")
    if 0 not in entry.missing_indices():
        return None, ""
    node = topo.node_by_name.get(given.master_addr)
    free = node.gpus_free if node is not None else 0
    if node is not None and free >= gang.gpus_per_pod:
        return given.master_addr, ""
    state = ("is no longer in the cluster" if node is None else f"is cordoned ({node.unschedulable_reason})"
             if not node.schedulable else f"has only {free} free GPU(s)")
    return None, (f"gang {gang.key}: pod 0 (rank 0, the rendezvous) must run on node {given.master_addr}, "
                  f"the meshfit.io/master-addr its {bound} bound member(s) were given, but that node {state} "
                  f"of the {gang.gpus_per_pod} needed; retried until it has room, or delete the bound "
                  f"members to re-place the whole gang")


def _place_rest(entry: Reservation, topo: ClusterTopology, policy: str, rest: list[int],
                pinned: str | None) -> Placement | None:
    """Place members `rest` as a sub-gang near the held (and pinned) nodes, widening the domain as needed."""
    gang, g = entry.gang, entry.gang.gpus_per_pod
    pods = tuple(PodSlot(j, gang.pods[i].name, g) for j, i in enumerate(rest))
    if gang.constraint.pod_domains:  # each member goes back to the domain it is pinned to (Kueue TAS), nowhere else
        pinned = TopologyConstraint(pod_domains=tuple(gang.constraint.pod_domains[i] for i in rest))
        sub = Gang(gang.namespace, gang.name, pods, Parallelism(tp=g, dp=len(rest)), constraint=pinned,
                   priority=gang.priority)
        placed = place(sub, topo, policy)
        return placed if placed.placed else None
    last: Placement | None = None
    for constraint in _candidate_constraints(entry, topo, pinned):
        sub = Gang(gang.namespace, gang.name, pods, Parallelism(tp=g, dp=len(rest)),
                   constraint=constraint, priority=gang.priority)
        last = place(sub, topo, policy)
        if last.placed:
            return last
    return None


def reserve_remaining(ledger: ReservationLedger, entry: Reservation, topo: ClusterTopology,
                      policy: str) -> tuple[Placement | None, str]:
    """Reserve the missing members of a partly held gang near the held ones: (placement, "") or (None, why).

    Consistent with what bound members were given: pod 0 goes on their master address (see
    `pinned_master`) and the rank order is theirs (a previously resolved `auto` included).
    """
    gang = entry.gang
    missing = entry.missing_indices()
    if not missing:
        return entry.placement, ""
    pinned, reason = pinned_master(entry, topo)
    if reason:
        return None, reason
    rest = [i for i in missing if not (pinned and i == 0)]
    hold = reservation_key(gang.key, 0)
    if pinned:  # hold pod 0's GPUs while the others are placed, so they cannot take them
        topo.add_pod(hold, pinned, gang.gpus_per_pod)
    try:
        sub = _place_rest(entry, topo, policy, rest, pinned) if rest else None
    finally:
        if pinned:
            topo.remove_pod(hold)
    if rest and sub is None:
        return None, (f"gang {gang.key}: its remaining {len(missing)} member(s) do not fit next to the "
                      f"bound ones")
    nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
    for j, i in enumerate(rest):
        nodes[i] = sub.pod_nodes[j]
    if pinned:
        nodes[0] = pinned
    given = entry.bound_given()
    order = given.rank_order if given is not None else gang.rank_order
    full = Placement(gang, PLACED, sub.policy if sub is not None else policy, order, None, nodes)
    ledger.reserve(full, missing)
    return full, ""
