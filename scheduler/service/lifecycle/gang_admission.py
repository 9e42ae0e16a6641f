"""`GangAdmission`, meshfit's gang queue in the service: who is admitted when, and from where.

A gang that does not fit, or would delay the queue's head, waits in `scheduler.gangs.queue`; `admit_waiting`
re-evaluates the queue in order whenever capacity may have freed and reserves what may start now -- never while
`BIND_BACKLOG_LIMIT` Bindings are in flight, so an admitted gang binds at once; pending gangs of meshfit's
profile that kube-scheduler never asks about (its own filters see no free GPUs) are queued from the watch
(`enqueue_unasked`), except those kube-scheduler's group cycle places (`in_group_cycle`).
"""

from __future__ import annotations

import time

from collections import Counter
from typing import Any, Callable, Mapping

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import Reservation
from scheduler.gangs.membership import gang_from_membership
from scheduler.gangs.profile import SCHEDULER_NAMES
from scheduler.gangs.queue import GangQueue, delays_head, since_text
from scheduler.gangs.reserve_ops import shortfall_reason
from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang
from scheduler.placement.offered import gpus_capped, offered_only
from scheduler.placement.result import Placement
from scheduler.service.binding.binding_wiring import DEFAULT_BACKLOG_LIMIT
from scheduler.service.lifecycle.gang_phases import GangPhases, OnReserved
from scheduler.service.lifecycle.member_fit import MemberFit, gang_members
from topology.model import ClusterTopology

UNASKED_AFTER_SECONDS = 3.0
"""A pending gang kube-scheduler has not asked about for this long is queued by meshfit from the watch."""
QUEUE_PASS_DEPTH = 64
"""At most this many waiting gangs are tried per queue pass (the simulator's backfill depth idea)."""
BIND_BACKLOG_LIMIT = DEFAULT_BACKLOG_LIMIT
"""Members reserved and not yet bound -- Bindings in flight, members nominated or assumed by kube-scheduler (see
`GangAdmission.bind_backlog`) -- above which no more gangs are reserved, by the queue or for a member kube-scheduler
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


def no_backlog() -> int:
    """`bind_backlog` without a direct binder: nothing in flight."""
    return 0


class GangAdmission:
    """Queue admission of gangs (call under the lock); its settings and hooks are wired by the scheduler, the direct
    binder (`use_direct_binder`) and the lifecycle's peers (`place_gang`, `unplaced`)."""

    def __init__(self, state: ClusterState, queue: GangQueue, policy: str, clock: Callable[[], float],
                 fit: MemberFit, phases: GangPhases, seen: dict[str, float],
                 unplaced: list[Callable[[Gang, int, Placement], str]], on_reserved: OnReserved) -> None:
        self.state, self.queue, self.policy, self.clock = state, queue, policy, clock
        self.fit, self.phases = fit, phases
        self.seen = seen
        """Pod uid -> last time it reached filter or bind (the lifecycle's); a gang asked about is not queued."""
        self.unplaced = unplaced
        """Called when a gang (`Gang`, priority, failed `Placement`) does not fit: a non-empty answer (e.g. "preempting
        gangs ...") replaces the shortfall reason the gang waits with (`GangLifecycle.unplaced`)."""
        self.on_reserved = on_reserved
        """The lifecycle's `reserved`: log, tell the pods, requeue the members kube-scheduler may be parking."""
        self.place_gang: Callable[[Gang, ClusterTopology, str], Placement] = place
        """`place(gang, topology, policy)` for new reservations (elastic gangs try their largest size that fits)."""
        self.scheduler_names: frozenset[str] = SCHEDULER_NAMES
        """`spec.schedulerName`s whose pending gangs meshfit queues from the watch (its kube-scheduler profile)."""
        self.group_cycle: dict[str, float] = {}
        """Pod uid -> when kube-scheduler's group cycle last asked for it (`PlacePodGroup`): its queue retries it."""
        self.group_cycle_sources: frozenset[str] = frozenset()
        """Gang sources whose members only kube-scheduler's group cycle places (`meshfit serve --group-cycle`)."""
        self.noticed: dict[str, float] = {}
        """Pod uid -> when a tick first saw it pending in the watch."""
        self.bind_backlog: Callable[[], int] = no_backlog
        self.backlog_limit = BIND_BACKLOG_LIMIT
        """Members the direct binder has taken on and not yet seen bound (Bindings in flight, members nominated or
        assumed); the queue admits no gang while it is at `BIND_BACKLOG_LIMIT`, so an admitted gang binds at once
        instead of queueing behind thousands of members."""
        self.pass_cut_short = False
        """The last queue pass stopped before its end (members backlog or time budget): the next tick passes again."""

    def use_direct_binder(self, bind_backlog: Callable[[], int], backlog_limit: int) -> None:
        """Members are bound by meshfit's direct binder: no gang is reserved while its Bindings in flight (and members
        nominated or assumed) reach `backlog_limit`."""
        self.bind_backlog, self.backlog_limit = bind_backlog, backlog_limit

    def forget_gone(self, known: Mapping[str, PodRecord]) -> None:
        """Forget what was noted about pods no longer `known` (uid -> record)."""
        for table in (self.noticed, self.group_cycle):
            for uid in [u for u in table if u not in known]:
                del table[uid]

    def in_group_cycle(self, record: PodRecord) -> bool:
        """Whether kube-scheduler's group cycle places this member (`PlacePodGroup`): it asked for it, or its gang
        source is one only the group cycle places; meshfit then neither queues it unasked nor requeues it."""
        return record.uid in self.group_cycle or (record.member is not None
                                                  and record.member.source in self.group_cycle_sources)

    def enqueue_unasked(self, now: float) -> None:
        """Queue the pending gangs of meshfit's scheduler profile the API server reports that kube-scheduler has
        not asked about for `UNASKED_AFTER_SECONDS` (its own filters see no free GPUs, so it never calls the
        extender): meshfit, not kube-scheduler's retry order, decides which gets room when it frees."""
        ledger, queue = self.state.ledger.entries, self.queue
        for key, members in self.state.gang_index.items():
            if key in ledger or key in queue.entries or key in self.phases.rolling_back:
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
        names = {r.member.index: r.name for r in gang_members(self.state, member.gang_key)}
        gang = gang_from_membership(member, names)
        if self.bind_backlog() >= self.backlog_limit:  # reserved only as fast as its members can be bound: queued meanwhile
            reason = (f"gang {gang.key} waits while meshfit binds the members of gangs reserved before it; it is "
                      f"reserved as they are bound")  # the same text each time: kube-scheduler rewrites no status
            self.queue.note(gang.key, record.priority, len(gang.pods), member.gpus_per_pod, reason, self.clock(),
                            offered)
            return None, reason
        return self._attempt(gang, record.priority, offered, record, self.fit.pending(member.gang_key, record))

    def _attempt(self, gang: Gang, priority: int, offered: frozenset[str] | None,
                 by: PodRecord | None, pending: list[PodRecord] = ()) -> tuple[Reservation | None, str]:
        topo, ledger, key = self.state.topology, self.state.ledger, gang.key
        if self.phases.is_rolling_back(key):
            return None, f"gang {key} is being rolled back; it is placed afresh once its evicted members are gone"
        if _short_by_count(gang, topo, pending):  # no placement exists: the members' room is not worked out
            allowed, caps = offered, {}
        else:
            allowed, caps = self.fit.member_room(list(pending), offered)
        with offered_only(topo, allowed), gpus_capped(topo, caps):
            placement = self.place_gang(gang, topo, self.policy)
        head = self.queue.head_before(key, priority, topo)
        if placement.placed and (head is None or not delays_head(topo, head, usage_of(placement, topo))):
            entry = ledger.reserve(placement)
            self.on_reserved(entry, by, "queue" if by is None else f"first member {by.name}")
            return entry, ""
        reason = (shortfall_reason(placement.gang, topo, placement) if not placement.placed else
                  f"gang {key} fits, but waits behind gang {head.key} ({head.pods} pods x {head.gpus_per_pod} GPUs, "
                  f"higher in the queue): starting now would take GPUs that gang is waiting for")
        if not placement.placed:
            reason += self.fit.unfit_note(gang, offered, allowed)
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
            members = gang_members(self.state, waiting.key)
            pending = [r for r in members if not r.node and r.member is not None]
            entry = self.state.ledger.get(waiting.key)
            if not pending or (entry is not None and not entry.missing_indices()):
                self.queue.admitted(waiting.key)
                continue
            if entry is not None:  # partly bound: `GangRepairs.repair` re-places its missing members, every tick
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
