"""meshfit's gang queue in the service (a mixin of `GangLifecycle`): who is admitted when, and from where.

A gang that does not fit, or would delay the queue's head, waits in `scheduler.gangs.queue`; `admit_waiting`
re-evaluates the queue in order whenever capacity may have freed and reserves what may start now -- never while
`BIND_BACKLOG_LIMIT` Bindings are in flight, so an admitted gang binds at once; pending gangs of meshfit's
profile that kube-scheduler never asks about (its own filters see no free GPUs) are queued from the watch.
"""

from __future__ import annotations

import time

from collections import Counter
from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import Reservation
from scheduler.gangs.membership import gang_from_membership
from scheduler.gangs.queue import delays_head, since_text
from scheduler.gangs.reserve_ops import shortfall_reason
from scheduler.placement.offered import gpus_capped, offered_only
from scheduler.placement.result import Placement
from scheduler.service.binding.binding_wiring import DEFAULT_BACKLOG_LIMIT

UNASKED_AFTER_SECONDS = 3.0
"""A pending gang kube-scheduler has not asked about for this long is queued by meshfit from the watch."""
QUEUE_PASS_DEPTH = 64
"""At most this many waiting gangs are tried per queue pass (the simulator's backfill depth idea)."""
BIND_BACKLOG_LIMIT = DEFAULT_BACKLOG_LIMIT
"""Members reserved and not yet bound -- Bindings in flight, members nominated or assumed by kube-scheduler (see
`GangLifecycle.bind_backlog`) -- above which no more gangs are reserved, by the queue or for a member kube-scheduler
asks about (it is queued instead): a gang reserved ahead of that holds its GPUs idle while it waits behind earlier
gangs' writes (at 5,000 nodes on 1.26, reserved -> bound p50 12 s).  With only Bindings counted, a 5,000-node
burst had the queue reserve 384 gangs in 20 s while their members waited for nominations, and kube-scheduler's
`/filter` calls timed out behind those passes."""
PASS_BUDGET_SECONDS = 0.25
"""A queue pass stops admitting after this long (the state lock is held throughout); the next tick goes on."""


def usage_of(placement: Placement, topo: Any) -> dict[int, int]:
    """Node index -> GPUs a placement would hold."""
    g = placement.gang.gpus_per_pod
    return {topo.node_by_name[name].index: pods * g for name, pods in Counter(placement.pod_nodes).items()}


def _short_by_count(gang: Any, topo: Any, pending: list[PodRecord]) -> bool:
    """True when a fixed-size gang asks more GPUs than the cluster has free at all: no placement exists, whatever its
    members' other requests allow (an elastic gang may still start smaller).  Checking the members' room per node
    first cost 12% of meshfit's busy samples in a 5,000-node burst, spent on gangs waiting for GPUs."""
    if any(r.member is not None and r.member.elastic is not None for r in pending):
        return False
    return len(gang.pods) * gang.gpus_per_pod > topo.gpus_free


class GangAdmission:
    """Queue admission; mixed into `GangLifecycle` (it provides `state`, `queue`, `policy`, `clock`, `members`,
    `reserved`, `unplaced`, `place_gang`, `bind_backlog`, `pass_cut_short`, `scheduler_names`, `seen`, `noticed`,
    `rolling_back`
    and `is_rolling_back`)."""

    state: Any
    queue: Any
    policy: str
    clock: Any
    place_gang: Any
    unplaced: list
    bind_backlog: Any
    pass_cut_short: bool
    scheduler_names: frozenset
    seen: dict
    noticed: dict
    rolling_back: dict
    member_nodes: Any
    group_cycle: dict
    group_cycle_sources: frozenset

    def in_group_cycle(self, record: PodRecord) -> bool:
        """Whether kube-scheduler's group cycle places this member (`PlacePodGroup`): it asked for it, or its gang
        source is one only the group cycle places; meshfit then neither queues it unasked nor requeues it."""
        return record.uid in self.group_cycle or (record.member is not None
                                                  and record.member.source in self.group_cycle_sources)

    def _enqueue_pending_from_watch(self, now: float) -> None:
        """Queue the pending gangs of meshfit's scheduler profile the API server reports that kube-scheduler has
        not asked about for `UNASKED_AFTER_SECONDS` (its own filters see no free GPUs, so it never calls the
        extender): meshfit, not kube-scheduler's retry order, decides which gets room when it frees."""
        ledger, queue = self.state.ledger.entries, self.queue
        for key, members in self.state.gang_index.items():
            if key in ledger or key in queue.entries or key in self.rolling_back:
                continue
            pending = [r for r in members.values() if not r.node and r.from_watch and r.member is not None
                       and r.scheduler_name in self.scheduler_names and not self.in_group_cycle(r)]
            for record in pending:
                self.noticed.setdefault(record.uid, now)
            if pending and all(r.uid not in self.seen and now - self.noticed[r.uid] >= UNASKED_AFTER_SECONDS
                               for r in pending):
                first = pending[0]
                reason = (f"gang {key} ({first.member.size} pods x {first.member.gpus_per_pod} GPUs) waits for room; "
                          f"kube-scheduler finds no node with free GPUs for its pods")
                queue.note(key, max(r.priority for r in pending), first.member.size, first.member.gpus_per_pod,
                           reason, now)

    def try_reserve(self, record: PodRecord, offered: frozenset[str] | None) -> tuple[Reservation | None, str]:
        """Place and reserve the gang of `record` if it fits and may start now; else queue it with the reason."""
        member = record.member
        names = {r.member.index: r.name for r in self.members(member.gang_key)}
        gang = gang_from_membership(member, names)
        if self.bind_backlog() >= self.backlog_limit:  # reserved only as fast as its members can be bound: queued meanwhile
            reason = (f"gang {gang.key} waits while meshfit binds the members of gangs reserved before it; it is "
                      f"reserved as they are bound")  # the same text each time: kube-scheduler rewrites no status
            self.queue.note(gang.key, record.priority, len(gang.pods), member.gpus_per_pod, reason, self.clock(),
                            offered)
            return None, reason
        return self._attempt(gang, record.priority, offered, record, self._pending_members(member.gang_key, record))

    def _pending_members(self, gang_key: str, record: PodRecord | None = None) -> list[PodRecord]:
        """The gang's unbound members (with `record`, which may not be indexed yet)."""
        found = {r.uid: r for r in self.members(gang_key) if not r.node}
        if record is not None:
            found[record.uid] = record
        return list(found.values())

    def allowed_nodes(self, members: list[PodRecord], offered: frozenset[str] | None) -> frozenset[str] | None:
        """The nodes a gang may be placed on: those offered (None: any) where each of its pending `members` also
        fits on everything besides GPUs (cpu, memory, pods, taints, selectors: `member_nodes`), so no member is
        reserved on a node it could never be bound to."""
        return self.member_room(members, offered)[0]

    def member_room(self, members: list[PodRecord], offered: frozenset[str] | None
                    ) -> tuple[frozenset[str] | None, dict[str, int]]:
        """`allowed_nodes`, and node -> the most GPUs the gang's members can take there together (each member's
        other requests counted once per member placed; `member_nodes`).  Members asking the same are checked once."""
        allowed, caps, asked = offered, {}, set()
        if any(r.member is not None and r.member.constraint.pod_domains for r in members):
            return offered, caps  # Kueue pinned each member to its own node: its admission already decided where
        for record in members:
            needs = record.needs
            key = repr(needs) if needs is not None else None
            if key is None or key in asked:
                continue
            asked.add(key)
            room = self.member_nodes(record)
            if room is None:
                continue
            allowed = frozenset(room) if allowed is None else allowed & frozenset(room)
            for name, gpus in room.items():
                caps[name] = min(gpus, caps.get(name, gpus))
        return allowed, caps

    def _unfit_note(self, gang: Any, offered: frozenset[str] | None, allowed: frozenset[str] | None) -> str:
        """"; N node(s) with free GPUs ..." when nodes with room for a member's GPUs were left out because the member
        does not fit there otherwise (cpu, memory, pods, taints, selectors), else ""."""
        if allowed is None or allowed == offered:
            return ""
        left_out = sum(1 for name, node in self.state.topology.node_by_name.items()
                       if node.gpus_free >= gang.gpus_per_pod and name not in allowed
                       and (offered is None or name in offered))
        return (f"; {left_out} node(s) with {gang.gpus_per_pod} free GPUs have no room for a member's other requests "
                f"(cpu, memory, pods) or fail its node constraints") if left_out else ""

    def _attempt(self, gang: Any, priority: int, offered: frozenset[str] | None,
                 by: PodRecord | None, pending: list[PodRecord] = ()) -> tuple[Reservation | None, str]:
        topo, ledger, key = self.state.topology, self.state.ledger, gang.key
        if self.is_rolling_back(key):
            return None, f"gang {key} is being rolled back; it is placed afresh once its evicted members are gone"
        if _short_by_count(gang, topo, pending):  # no placement exists: the members' room is not worked out
            allowed, caps = offered, {}
        else:
            allowed, caps = self.member_room(list(pending), offered)
        with offered_only(topo, allowed), gpus_capped(topo, caps):
            placement = self.place_gang(gang, topo, self.policy)
        head = self.queue.head_before(key, priority, topo)
        if placement.placed and (head is None or not delays_head(topo, head, usage_of(placement, topo))):
            entry = ledger.reserve(placement)
            self.reserved(entry, by, "queue" if by is None else f"first member {by.name}")
            return entry, ""
        reason = (shortfall_reason(placement.gang, topo, placement) if not placement.placed else
                  f"gang {key} fits, but waits behind gang {head.key} ({head.pods} pods x {head.gpus_per_pod} GPUs, "
                  f"higher in the queue): starting now would take GPUs that gang is waiting for")
        if not placement.placed:
            reason += self._unfit_note(gang, offered, allowed)
            for hook in self.unplaced:
                reason = hook(gang, priority, placement) or reason
        waiting = self.queue.note(key, priority, len(placement.gang.pods), gang.gpus_per_pod, reason, self.clock(),
                                  offered)
        return None, f"{reason} [queue position {self.queue.position(key)}, waiting since {since_text(waiting.arrived_at)}]"

    def admit_waiting(self) -> list[str]:
        """One pass over the waiting gangs in order; reserves those that may start now (returns their keys)."""
        admitted = []
        free = self.state.topology.gpus_free
        stop_at = time.perf_counter() + PASS_BUDGET_SECONDS
        self.pass_cut_short = False
        for waiting in self.queue.ordered()[:QUEUE_PASS_DEPTH]:
            if self.bind_backlog() >= self.backlog_limit or time.perf_counter() > stop_at:
                self.pass_cut_short = True  # the next tick passes again, capacity changed or not
                break
            members = self.members(waiting.key)
            pending = [r for r in members if not r.node and r.member is not None]
            entry = self.state.ledger.get(waiting.key)
            if not pending or (entry is not None and not entry.missing_indices()):
                self.queue.admitted(waiting.key)
                continue
            if entry is not None:  # partly bound: `_repair` re-places its missing members, every tick
                continue
            if waiting.pods * waiting.gpus_per_pod > free:
                continue
            names = {r.member.index: r.name for r in members}
            gang = gang_from_membership(pending[0].member, names)
            entry, _ = self._attempt(gang, waiting.priority, waiting.offered, None, pending)
            if entry is not None:
                admitted.append(waiting.key)
                free = self.state.topology.gpus_free
        return admitted
