"""Rebuilding the gang ledger from the API server's objects after a (re)start or a relist.

Nothing of meshfit's own survives a crash, and nothing needs to: the bound pods say which gangs are
(partly) bound and what their members were given (`meshfit.io/*` bind annotations); the pending
members' `status.nominatedNodeName` says where meshfit had reserved them.  Every partly bound gang
gets its missing members reserved *at once* -- before any filter call can hand their GPUs, or pod
0's rendezvous node, to another gang: first every gang's pod 0 on its rendezvous node, then members
on their nominated nodes when those still have room, then the rest next to the bound members
(`reserve_remaining`).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Iterable

from scheduler.gangs.membership import gang_from_membership
from scheduler.placement.result import PLACED, Placement
from scheduler.gangs.reserve_ops import reserve_remaining
from topology.k8s import FINISHED_PHASES


def rebuild_gangs(state: Any, policy: str | None) -> list[str]:
    """Record bound gang members in the ledger; with `policy`, re-hold the missing members of partly
    bound gangs now.  Call under `state.lock`; returns the gang keys rebuilt."""
    ledger = state.ledger
    rebuilt: set[str] = set()
    for record in state.pods.values():
        member = record.member
        if member is None or not record.node or record.phase in FINISHED_PHASES:
            continue
        entry = ledger.get(member.gang_key)
        slot = entry.slots.get(member.index) if entry else None
        if slot is not None and slot.state == "bound":
            pass
        elif entry is not None and entry.placement is not None and slot is not None:
            ledger.mark_bound(member.gang_key, member.index, record.name, record.node)
        else:
            ledger.record_bound(gang_from_membership(member), member.index, record.name, record.node)
            rebuilt.add(member.gang_key)
        ledger.note_given(member.gang_key, record.given)
    partial = [ledger.get(key) for key in sorted(rebuilt)]
    partial = [entry for entry in partial if entry is not None and entry.missing_indices()]
    for entry in partial:
        started = partly_bound_for(state.gang_index.get(entry.gang_key, {}).values(), len(entry.gang.pods))
        if started is not None:  # the completion deadline counts from when the gang became partly bound
            entry.bound_since = ledger.clock() - started
    if policy is not None:
        for entry in partial:  # first every gang's pod 0 on its rendezvous node, before anyone else moves in
            _hold_rendezvous(state, entry)
        for entry in partial:
            _hold_nominated(state, entry)
        # largest first (whole-node members, most missing), so small members do not fragment the nodes
        for entry in sorted(partial, key=lambda e: (-e.gang.gpus_per_pod, -len(e.missing_indices()), e.gang_key)):
            reserve_remaining(ledger, entry, state.topology, policy)
    return sorted(rebuilt)


def partly_bound_for(records: Iterable[Any], size: int, now: float | None = None) -> float | None:
    """Seconds a gang has been partly bound, from its members' API objects, or None when they cannot say.

    A fail-over or restart must not restart a partly bound gang's completion clock (the 30-minute 1.26 soak: a gang
    partly bound for 50.8 s against a 50 s limit, its clock restarted by the new leader).  The episode began when
    the gang's first member of it was bound (`PodScheduled`'s transition) -- or, for a gang that was whole and lost a
    member, not before the oldest pending member was created (its replacement).  No pending member (the missing
    ones not created yet): None, the caller counts from now."""
    bound, pending = [], []
    for record in records:
        if record.member is None or record.member.index >= size or record.terminating \
                or record.phase in FINISHED_PHASES or not record.since:
            continue
        try:
            at = datetime.fromisoformat(record.since).timestamp()
        except ValueError:
            continue
        (bound if record.node else pending).append(at)
    if not bound or not pending:
        return None
    wall = time.time() if now is None else now
    return max(0.0, wall - max(min(bound), min(pending)))


def _hold_rendezvous(state: Any, entry: Any) -> None:
    """Reserve a missing pod 0 on the master address its bound peers were given, when that node has room."""
    given, gang = entry.bound_given(), entry.gang
    if given is None or 0 not in entry.missing_indices():
        return
    node = state.topology.node_by_name.get(given.master_addr)
    if node is None or node.gpus_free < gang.gpus_per_pod:
        return
    nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
    nodes[0] = given.master_addr
    state.ledger.reserve(Placement(gang, PLACED, "rendezvous", given.rank_order, None, nodes), [0])


def _hold_nominated(state: Any, entry: Any) -> None:
    """Reserve missing members on the nodes they were nominated to, where those still have room."""
    gang, topo = entry.gang, state.topology
    nominated = {r.member.index: r.nominated for r in state.gang_index.get(gang.key, {}).values()
                 if not r.node and r.nominated}
    nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
    chosen = []
    for index in entry.missing_indices():
        node = topo.node_by_name.get(nominated.get(index, ""))
        if node is not None and node.gpus_free >= gang.gpus_per_pod * (1 + chosen.count(node.name)):
            nodes[index] = node.name
            chosen.append(node.name)
    picked = [i for i in entry.missing_indices() if nodes[i]]
    given = entry.bound_given()
    if picked and (given is None or 0 not in picked or nodes[0] == given.master_addr):
        order = given.rank_order if given is not None else gang.rank_order
        ledger_placement = Placement(gang, PLACED, "nominated", order, None, nodes)
        state.ledger.reserve(ledger_placement, picked)
