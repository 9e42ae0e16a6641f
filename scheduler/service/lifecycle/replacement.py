"""Failure replacement that keeps the rank map: members bound to failed nodes get new nodes, same ranks.

A `GangLifecycle.upkeep` pass (under the lock, every tick).  For each gang with bound members on a
node failed for at least `grace` seconds (`scheduler.gangs.health`: NotReady, cordoned, NoExecute
taint, condition, label, GPUs lost, deleted):

1. pod 0 lost (rank 0 hosts the rendezvous every member was told): the documented rollback policy
   applies, the gang is evicted whole and placed afresh (`GangLifecycle.rollback`);
2. otherwise *all* lost members at once (several nodes at once) have their slots released and
   re-reserved with the engine (`scheduler.gangs.reserve_ops.reserve_remaining`, which keeps pod indices,
   rank order and pod 0's rendezvous) on candidate sets tried in order: the gang's own spares; then,
   from the leaf of pod 0 outwards, the pool's spares in that domain, then any room in that domain
   (nearest domain first, spares first among equals: `scheduler.gangs.spares`);
3. the lost members are evicted (their controller recreates them; the recreated pod of the same
   index filters onto its reserved replacement node and binds with the same `meshfit.io/ranks`),
   the evicted pods are marked superseded so their last updates leave the new slots alone, the
   completion deadline restarts, and the rank table is republished;
4. the predicted step communication of the original layout and of the replaced one
   (`scheduler.placement.result.cost.estimate_cost`) goes into a log line, a `GangMembersReplaced` Event, the gang's
   `GET /gangs` row (`replacement`) and `meshfit_member_replacements_total{source}`.

With no room anywhere the lost members are still evicted (their node is failed) and the gang waits
incomplete at the head of the queue (`GangRepairs.repair`), where the completion timeout's
rollback still applies.

Failures that come close together are handled as one: while another member of the gang sits on a node
failed within its grace, the gang waits for that node too (or for it to recover), for at most one more
`grace` after its first lost member's.  A replacement restarts every rank, so two nodes failing a second
apart cost one restart, not two, and one event and `replacement` row name both.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable

from scheduler.placement.cost import estimate_cost
from scheduler.gangs.health import SOURCE_DELETED, SOURCE_NOT_READY, NodeFailure
from scheduler.placement.offered import offered_only
from scheduler.gangs.ledger import SLOT_BOUND, SLOT_RELEASED, Reservation
from scheduler.gangs.reserve_ops import reserve_remaining
from scheduler.service.lifecycle.actions import EVENT_NORMAL, EVENT_WARNING
from scheduler.service.binding.binder import reservation_placement
from scheduler.service.lifecycle.gang_lifecycle import GangLifecycle
from scheduler.service.lifecycle.spare_pool import SparePool

log = logging.getLogger("meshfit.replace")

DEFAULT_GRACE_SECONDS = 15.0
EVICT_RETRY_SECONDS = 10.0
"""An evicted member still present this long after its eviction is evicted again (the call may have failed)."""


class MemberReplacement:
    """Replaces gang members bound to failed nodes; see the module docstring."""

    def __init__(self, lifecycle: GangLifecycle, spares: SparePool, grace: float = DEFAULT_GRACE_SECONDS,
                 on_replaced: Callable[[str, int], None] | None = None) -> None:
        self.lifecycle, self.state, self.spares = lifecycle, lifecycle.state, spares
        self.grace = float(grace)
        self.on_replaced = on_replaced
        """Called with (failure source, members replaced) for the metrics."""
        self.layout_cost: dict[str, tuple[tuple[str, ...], float]] = {}
        """Gang key -> (nodes by pod index, predicted step communication seconds) of its last whole layout."""
        self.last: dict[str, dict] = {}
        """Gang key -> its last replacement (for `GET /gangs`)."""
        self.evicted: dict[str, tuple[float, str]] = {}
        """Uid of an evicted (superseded) member -> (when it was last evicted, why)."""

    # ----- the pass ---------------------------------------------------------------------------
    def upkeep(self, now: float) -> None:
        """One pass: remember whole layouts' costs, then replace members on nodes failed past the grace."""
        health, nodes = self.state.health, self.state.nodes
        entries = self.state.ledger.entries
        referenced: set[str] = set()
        lost_by_gang: dict[str, dict[int, NodeFailure]] = {}
        for key, entry in entries.items():
            for slot in entry.slots.values():
                if slot.state != SLOT_BOUND:
                    continue
                referenced.add(slot.node)
                if slot.node not in nodes and slot.node not in health.failed:
                    health.observe(slot.node, None)  # bound to a node the cluster no longer has
            if entry.status == "bound":
                self._remember_cost(key, entry)
        failed = {f.node: f for f in health.failed_for(now, self.grace)}
        for name, failure in list(health.failed.items()):
            if failure.source == SOURCE_DELETED and name not in referenced:
                health.forget(name)  # nothing bound there any more
        for key in [k for k in self.layout_cost if k not in entries]:
            del self.layout_cost[key]
        for key in [k for k in self.last if k not in entries and k not in self.state.gang_index]:
            del self.last[key]
        self._evict_again(now)
        self._spares_for_incomplete(now)
        if not failed:
            return
        for key, entry in entries.items():
            lost = {s.index: failed[s.node] for s in entry.slots.values()
                    if s.state == SLOT_BOUND and s.node in failed}
            if lost and key not in self.lifecycle.rolling_back and not self._settling(entry, lost, now):
                lost_by_gang[key] = lost
        for key, lost in lost_by_gang.items():
            entry = entries.get(key)
            if entry is not None:
                self._replace(entry, lost, now)

    def _settling(self, entry: Reservation, lost: dict[int, NodeFailure], now: float) -> bool:
        """True while another member is on a node failed within the grace and the first lost member's node
        has been failed for less than two graces: wait to replace both at once."""
        failing = self.state.health.failed
        within = any(s.state == SLOT_BOUND and s.index not in lost and s.node in failing
                     for s in entry.slots.values())
        return within and now - min(f.since for f in lost.values()) < 2 * self.grace

    def _remember_cost(self, key: str, entry: Reservation) -> None:
        layout = tuple(entry.node_of(i) or "" for i in range(len(entry.gang.pods)))
        if self.layout_cost.get(key, ((),))[0] != layout:
            cost = self._price(entry, layout)
            if cost is not None:
                self.layout_cost[key] = (layout, cost)

    def _price(self, entry: Reservation, layout: tuple[str, ...]) -> float | None:
        topo = self.state.topology
        if not all(n in topo.node_by_name for n in layout):
            return None
        order = reservation_placement(entry).rank_order
        indices = [topo.node_by_name[n].index for n in layout]
        return estimate_cost(entry.gang, indices, topo, order).step_comm_seconds

    # ----- one gang ---------------------------------------------------------------------------
    def _replace(self, entry: Reservation, lost: dict[int, NodeFailure], now: float) -> None:
        key = entry.gang_key
        records = {r.member.index: r for r in self.lifecycle.members(key)
                   if r.node and r.member.index in lost and r.node == entry.slots[r.member.index].node}
        why = "; ".join(sorted({f"node {f.node} {f.reason}" for f in lost.values()}))
        if 0 in lost:
            self._count(lost)
            self.lifecycle.rollback(entry, f"pod 0 (rank 0, the rendezvous) was on a failed node ({why})")
            return
        before = self.layout_cost.get(key)
        old_nodes = {i: entry.slots[i].node for i in lost}
        for index in lost:
            entry.slots[index].state = SLOT_RELEASED  # a bound slot holds no reservation key: nothing to free
            if index in records:
                self.state.superseded.add(records[index].uid)
                if entry.given is not None and lost[index].source != SOURCE_NOT_READY:
                    entry.pinned_by.add(records[index].uid)  # its kubelet runs it on with the rendezvous until gone
        placement, reason, spent = self._place_lost(entry)
        entry.bound_since = now  # the completion deadline counts from the replacement
        self._count(lost)
        if placement is None:
            message = (f"gang {key}: members {sorted(lost)} were on failed nodes ({why}); evicted, their "
                       f"replacements wait for room next to the gang: {reason}")
            log.warning(message, extra={"gang": key, "decision": "replacement-waiting"})
        else:
            layout = tuple(entry.node_of(i) or "" for i in range(len(entry.gang.pods)))
            after = self._price(entry, layout)
            self.last[key] = {
                "at": now, "pods": sorted(lost), "from": [old_nodes[i] for i in sorted(lost)],
                "to": [entry.node_of(i) for i in sorted(lost)], "reasons": sorted({f.source for f in lost.values()}),
                "spares_used": dict(spent),
                "step_comm_seconds_before": before[1] if before else None, "step_comm_seconds_after": after}
            message = (f"gang {key}: members {sorted(lost)} replaced, same ranks, "
                       + ", ".join(f"pod {i} {old_nodes[i]} -> {entry.node_of(i)}" for i in sorted(lost))
                       + f" ({why}); predicted step communication {_seconds(before[1] if before else None)} "
                         f"before, {_seconds(after)} after" + (f"; spares used: {dict(spent)}" if spent else ""))
            log.info(message, extra={"gang": key, "decision": "replaced"})
            self.lifecycle.republish.add(key)
        for index in sorted(records):
            self.evicted[records[index].uid] = (now, message)
            self.lifecycle.dispatcher.evict(self.lifecycle.pod_ref(records[index]), message)
        members = self.lifecycle.members(key)
        if members:
            first = min(members, key=lambda r: r.member.index)
            self.lifecycle.dispatcher.event(self.lifecycle.pod_ref(first), "GangMembersReplaced" if placement
                                            else "GangMembersLost", message,
                                            EVENT_NORMAL if placement else EVENT_WARNING)

    def _evict_again(self, now: float) -> None:
        """Evict again the superseded members still present after `EVICT_RETRY_SECONDS` (a failed call)."""
        for uid in list(self.evicted):
            record = self.state.pods.get(uid)
            if record is None or uid not in self.state.superseded:
                del self.evicted[uid]
            elif now - self.evicted[uid][0] >= EVICT_RETRY_SECONDS:
                self.evicted[uid] = (now, self.evicted[uid][1])
                self.lifecycle.dispatcher.evict(self.lifecycle.pod_ref(record), self.evicted[uid][1])

    def _spares_for_incomplete(self, now: float) -> None:
        """Partly bound gangs whose missing members found no ordinary room this tick (`GangRepairs.repair`
        ran first: members deleted by someone else, or a replacement that waited) may take spares."""
        if not self.spares.holds:
            return
        for key, entry in list(self.state.ledger.entries.items()):
            if key in self.lifecycle.rolling_back or not entry.has_bound() or not entry.missing_indices():
                continue
            missing = entry.missing_indices()
            if 0 in missing and entry.bound_given() is not None:
                continue  # pod 0 goes back to its rendezvous node: no spare can hold it
            placement, _, spent = self._place_lost(entry)
            if placement is not None:
                message = (f"gang {key}: missing members {missing} re-placed on spares "
                           + ", ".join(f"pod {i} -> {entry.node_of(i)}" for i in missing) + f" ({dict(spent)})")
                log.info(message, extra={"gang": key, "decision": "replaced"})
                self.lifecycle.republish.add(key)

    def _count(self, lost: dict[int, NodeFailure]) -> None:
        if self.on_replaced is not None:
            for source, count in Counter(f.source for f in lost.values()).items():
                self.on_replaced(source, count)

    def _candidate_sets(self, entry: Reservation) -> list[frozenset[str]]:
        """Node sets tried in order: own spares; then per domain from pod 0's leaf outwards, its spares, then all."""
        topo = self.state.topology
        own = {h.node for h in self.spares.of_gang(entry.gang_key)}
        pool = set(self.spares.pool_nodes())
        sets: list[frozenset[str]] = [frozenset(own)] if own else []
        home = topo.node_by_name.get(entry.node_of(0) or "")
        if home is None:
            return sets + [frozenset(n.name for n in topo.nodes)]
        for domain_id in reversed(home.path):
            members = {topo.nodes[i].name for i in topo.domains[domain_id].nodes}
            for candidate in (frozenset(own | (pool & members)), frozenset(own | members)):
                if candidate and (not sets or candidate != sets[-1]):
                    sets.append(candidate)
        return sets

    def _place_lost(self, entry: Reservation):
        """Reserve every missing member on the first candidate set that fits: (placement, "", spares spent)
        or (None, why, {})."""
        topo, ledger = self.state.topology, self.state.ledger
        reason = "no candidate nodes"
        missing = entry.missing_indices()
        for candidate in self._candidate_sets(entry):
            lent = self.spares.lend(entry.gang_key, set(candidate))
            placement = None
            try:
                with offered_only(topo, candidate):
                    placement, reason = reserve_remaining(ledger, entry, topo, self.lifecycle.policy)
            finally:
                placed = Counter(entry.node_of(i) for i in missing) if placement is not None else Counter()
                spent = self.spares.settle(lent, placed)
            if placement is not None:
                return placement, "", spent
        return None, reason, {}

    # ----- reporting ----------------------------------------------------------------------------
    def row_extra(self, key: str, row: dict) -> None:
        """`GET /gangs`: the gang's last replacement and the spare slots held for it."""
        if key in self.last:
            row["replacement"] = self.last[key]
        held = self.spares.of_gang(key)
        if held:
            row["spares"] = sorted(h.node for h in held)


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.4g} s"
