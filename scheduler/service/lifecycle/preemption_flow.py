"""Whole-gang preemption in the service: meshfit's queue and kube-scheduler's `/preempt` verb.

`PreemptionFlow` hooks `GangLifecycle.unplaced` (called under the state lock when a gang does not
fit).  When the gang's members may preempt (not `preemptionPolicy: Never`, `--preemption` on) and
`scheduler.gangs.preemption.plan_preemption` finds a plan, every victim is evicted *whole* at once: each
bound member of a victim gang is evicted (its controller recreates it), its ledger entry released
and the gang marked rolling back (as `GangLifecycle.rollback` does), so it is not placed again until
its evicted members are gone -- and then only behind the preemptor, which heads the queue (EASY
keeps others off the GPUs it waits for).  Events: `GangPreempted` (Warning) on every victim pod,
`GangPreempting` on the preemptor.  While the victims terminate, the gang is not planned again (no
eviction storm); evictions still pending after `REEVICT_SECONDS` are sent again (a lost API call).
Once they are gone the preemptor is reserved inside the plan's domain (`upkeep`, every tick) -- or
earlier by its own filter call, whichever comes first.

kube-scheduler's `/preempt` (DefaultPreemption's extender step, 1.26: `callExtenders` hands the
candidate nodes and victims to the extender, then `SelectCandidate` picks ONE node from what it
returns, deletes that node's victims and nominates the pod there): for a gang member the answer is
always *empty* -- one node's victims would evict part of a gang, and one nominated node is no place
for a multi-node gang -- and meshfit runs its own topology-first plan instead (evicting whole gangs
itself); kube-scheduler then reports no candidate and the member waits until meshfit reserves its
gang and requeues it.  A pod that is not in a gang keeps kube-scheduler's choice among the nodes
whose victims evict whole gangs or no gang pod.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from scheduler.placement.engine import place
from scheduler.gangs.queue import delays_head
from scheduler.placement.jobs import Gang, JobSpecError
from scheduler.gangs.membership import gang_from_membership
from scheduler.placement.offered import offered_only
from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.preemption import Holder, PreemptionPlan, plan_preemption
from scheduler.gangs.ledger import SLOT_BINDING, SLOT_BOUND, SLOT_RESERVED, reservation_key
from scheduler.service.lifecycle.actions import EVENT_NORMAL, EVENT_WARNING, PodRef
from scheduler.cache.state import pod_holding_key
from topology.k8s import FINISHED_PHASES
from topology.model import TopologyError


log = logging.getLogger("meshfit.preemption")

REEVICT_SECONDS = 30.0
"""A victim pod still present this long after its eviction is evicted again (the call may have been lost)."""
GIVE_UP_SECONDS = 600.0
"""A preemption whose victims are still present this long is dropped (the gang may plan again)."""
COOLDOWN_SECONDS = 30.0
"""After a preemption ends without a reservation, the gang waits this long before planning again."""
NEVER = "Never"
GANG, POD = "gang", "pod"
"""What preempted: a gang (this flow) or a lone GPU pod (`scheduler.service.lifecycle.lone_preemption`)."""
PREEMPTORS = (GANG, POD)
WAITING_PLANNED = 8
"""Waiting gangs (queue order) planned for per tick when the queue pass skips them for lack of free GPUs."""
RETRY_SECONDS = 5.0
"""A waiting gang is planned for at most this often from the tick."""


@dataclass
class PendingPreemption:
    """A preemption under way: the preemptor, its plan, and the evicted pods not yet gone."""

    gang: Gang
    priority: int
    plan: PreemptionPlan
    started_at: float
    evicted: dict[str, PodRef] = field(default_factory=dict)
    """Uid -> evicted pod still present."""
    last_evict_at: float = 0.0


class PreemptionFlow:
    """Plans, evicts and follows whole-gang preemptions for one service's state and gang lifecycle; see the module
    docstring."""

    def __init__(self, state: Any, lifecycle: Any, rank_tables: Any, enabled: bool = True) -> None:
        self.state, self.lifecycle, self.rank_tables = state, lifecycle, rank_tables
        self.enabled = enabled
        self.pending: dict[str, PendingPreemption] = {}
        """Preemptor gang key -> the preemption under way."""
        self.cooldown: dict[str, float] = {}
        """Gang key -> time before which it does not plan a preemption again."""
        self.done: dict[str, str] = {}
        """Preemptor gang key -> what it preempted (`GET /gangs` field `preempted`)."""
        self.counters: Counter = Counter()
        self.tried: dict[str, float] = {}
        """Gang key -> when the tick last planned for it."""
        self.observe: Callable[[PreemptionPlan, str], None] | None = None
        """Called with each plan carried out and what preempted, `GANG` or `POD` (metrics)."""
        self.lifecycle.unplaced.append(self.on_unplaced)
        self.lifecycle.upkeep.append(self.upkeep)
        self.lifecycle.row_extras.append(self.row_extra)

    # ----- planning --------------------------------------------------------------------------
    def holders(self, exclude: str, below: int | None = None) -> list[Holder]:
        """Every gang in the ledger and every bound GPU pod outside gangs, as eviction candidates; with `below`, only
        those of a priority under it (no other can be a victim: `plan_preemption`).  A gang of the cluster's
        common priority asks this at each refusal of a burst, so holders it could never evict are skipped before
        anything is built for them (in a 5,000-node burst on 2 cores, building them all was 14% of meshfit's busy
        samples)."""
        state, found = self.state, []
        for key, entry in state.ledger.entries.items():
            if key == exclude:
                continue
            members = list(state.gang_index.get(key, {}).values())
            priority = max((r.priority for r in members), default=entry.gang.priority)
            if below is not None and priority >= below:
                continue
            holdings = [reservation_key(key, s.index) for s in entry.slots.values()
                        if s.state in (SLOT_RESERVED, SLOT_BINDING)]
            holdings += [pod_holding_key(r.namespace, r.name) for r in members if r.node]
            safe = bool(members) and key not in self.lifecycle.rolling_back and \
                not any(s.state == SLOT_BINDING for s in entry.slots.values())
            found.append(Holder(key, priority, tuple(holdings), safe))
        for record in state.pods.values():
            if below is not None and record.priority >= below:
                continue
            if record.member is None and record.node and record.gpus > 0 and record.phase not in FINISHED_PHASES:
                key = pod_holding_key(record.namespace, record.name)
                found.append(Holder(key, record.priority, (key,), True, is_gang=False))
        return found

    def may_preempt(self, key: str) -> bool:
        """Preemption is on and no member of the gang says `preemptionPolicy: Never`."""
        members = self.state.gang_index.get(key, {}).values()
        return self.enabled and not any(r.preemption_policy == NEVER for r in members)

    def gang_priority(self, key: str, fallback: int) -> int:
        """The members' own `spec.priority` (not a queue priority such as a partly bound gang's)."""
        members = self.state.gang_index.get(key, {}).values()
        return max((r.priority for r in members), default=fallback)

    def on_unplaced(self, gang: Any, priority: int, placement: Any) -> str:
        """`GangLifecycle.unplaced` hook: preempt for the gang if it may and a plan exists; the reason it waits."""
        key, now = gang.key, self.lifecycle.clock()
        if key in self.pending:
            return self.waiting_reason(self.pending[key])
        if not self.may_preempt(key) or self.cooldown.get(key, 0.0) > now:
            return ""
        priority = self.gang_priority(key, priority)
        try:
            plan = plan_preemption(self.state.topology, gang, priority, self.holders(key, priority),
                                  self.lifecycle.policy)
        except (JobSpecError, TopologyError, ValueError) as exc:  # a gang the engine refuses: nothing to plan
            log.warning("gang %s: no preemption plan: %s", key, exc, extra={"gang": key})
            return ""
        if plan is None:
            return ""
        self.carry_out(gang, priority, plan, now)
        return self.waiting_reason(self.pending[key])

    def waiting_reason(self, pending: PendingPreemption) -> str:
        """Why a preemptor waits while its victims terminate."""
        plan = pending.plan
        return (f"gang {plan.preemptor} preempted {len(plan.victims)} lower-priority holder(s) in {plan.level} "
                f"{plan.domain} ({plan.victim_gpus} GPUs); waiting for {len(pending.evicted)} evicted pod(s) to "
                f"terminate, then it is reserved there")

    # ----- eviction --------------------------------------------------------------------------
    def carry_out(self, gang: Gang, priority: int, plan: PreemptionPlan, now: float) -> None:
        """Evict every victim whole, tell both sides, and follow the preemption until the gang is reserved."""
        pending = PendingPreemption(gang, priority, plan, now, last_evict_at=now)
        self.pending[gang.key] = pending
        pending.evicted = self.evict_victims(plan, f"gang {gang.key}", priority)
        names = ", ".join(f"{v.key} (priority {v.priority})" for v in plan.victims)
        message = (f"gang {gang.key} (priority {priority}, {len(gang.pods)} pods x {gang.gpus_per_pod} GPUs) preempts "
                   f"{names} in {plan.level} {plan.domain}: {plan.victim_gpus} GPUs freed; reserved there once "
                   f"they are gone")
        log.warning(message, extra={"gang": gang.key, "decision": "preempting", "domain": plan.domain})
        members = self.lifecycle.members(gang.key)
        if members:
            first = min(members, key=lambda r: r.member.index)
            self.lifecycle.dispatcher.event(self.lifecycle.pod_ref(first), "GangPreempting", message, EVENT_NORMAL)
        self.done[gang.key] = f"{names} in {plan.level} {plan.domain} ({plan.victim_gpus} GPUs)"
        self.count(plan, GANG)

    def evict_victims(self, plan: PreemptionPlan, preemptor: str, priority: int) -> dict[str, PodRef]:
        """Evict every victim of `plan` whole for `preemptor` ("gang ns/name" or "pod ns/name"); uid -> pod evicted."""
        evicted: dict[str, PodRef] = {}
        for victim in plan.victims:
            message = (f"{'gang ' if victim.is_gang else 'pod '}{victim.key} (priority {victim.priority}) preempted "
                       f"whole by {preemptor} (priority {priority}) to clear {plan.level} {plan.domain}")
            log.warning(message, extra={"gang": victim.key, "decision": "preempted",
                                        "preemptor": preemptor.partition(" ")[2]})
            for ref in self.evict_victim(victim, message):
                evicted[ref.uid] = ref
        return evicted

    def count(self, plan: PreemptionPlan, preemptor: str) -> None:
        """Count a preemption carried out for a `preemptor` of kind `GANG` or `POD` (metrics)."""
        self.counters["preemptions"] += 1
        self.counters["preempted_gpus"] += plan.victim_gpus
        if self.observe is not None:
            self.observe(plan, preemptor)

    def evict_victim(self, victim: Holder, message: str) -> list[PodRef]:
        """Evict one victim whole (a gang: every member, its ledger entry released, rolling back); the pods evicted."""
        lifecycle, evicted = self.lifecycle, []
        if not victim.is_gang:
            namespace, _, name = victim.key[len("pod:"):].partition("/")
            record = self.state.pod(namespace, name)
            records = [record] if record is not None and record.node else []
        else:
            records = lifecycle.members(victim.key)
            lifecycle.notices.flush(victim.key)
        for record in records:
            ref = lifecycle.pod_ref(record)
            lifecycle.dispatcher.event(ref, "GangPreempted" if victim.is_gang else "Preempted", message, EVENT_WARNING)
            if record.node:
                lifecycle.dispatcher.evict(ref, message)
                evicted.append(ref)
        if victim.is_gang:
            lifecycle.observe(victim.key)  # the phase it is leaving
            self.state.ledger.unreserve(victim.key)
            if evicted:  # not placed again until its evicted members are gone
                lifecycle.rolling_back[victim.key] = {ref.uid for ref in evicted}
            lifecycle.observe(victim.key)
        return evicted

    # ----- follow-up ---------------------------------------------------------------------------
    def upkeep(self, now: float) -> None:
        """Every tick, under the lock: re-send lost evictions, keep the freed room, reserve preemptors, and
        plan for waiting gangs the queue pass skips (it only tries gangs no larger than the free GPUs)."""
        self._follow(now)
        self._plan_for_waiting(now)
        known = self.state.gang_index
        for table in (self.tried, self.cooldown, self.done):
            for key in [k for k in table if k not in known]:
                del table[key]  # the gang is gone

    def _plan_for_waiting(self, now: float) -> None:
        """The first waiting gangs larger than the free GPUs get a preemption plan (every `RETRY_SECONDS`)."""
        lifecycle, free = self.lifecycle, self.state.topology.gpus_free
        for waiting in lifecycle.queue.ordered()[:WAITING_PLANNED]:
            key = waiting.key
            recently = now - self.tried.get(key, -RETRY_SECONDS) < RETRY_SECONDS
            if (waiting.pods * waiting.gpus_per_pod <= free or key in self.pending or key in lifecycle.rolling_back
                    or self.state.ledger.get(key) is not None or recently):
                continue
            members = [r for r in lifecycle.members(key) if r.member is not None]
            if not members or all(r.node for r in members):
                continue
            self.tried[key] = now
            names = {r.member.index: r.name for r in members}
            gang = gang_from_membership(members[0].member, names)
            reason = self.on_unplaced(gang, self.gang_priority(key, waiting.priority), None)
            if reason:
                waiting.reason = reason

    def _follow(self, now: float) -> None:
        for key, pending in list(self.pending.items()):
            members = self.lifecycle.members(key)
            if not any(not r.node for r in members) or self.state.ledger.get(key) is not None:
                del self.pending[key]  # gone, or reserved by its own filter call or the queue
                continue
            pending.evicted = {uid: ref for uid, ref in pending.evicted.items() if uid in self.state.pods}
            self._drop_stale_holds(pending)
            if pending.evicted:
                if now - pending.started_at > GIVE_UP_SECONDS:
                    log.warning("gang %s: %d preempted pod(s) still present after %.0f s; preemption dropped",
                                key, len(pending.evicted), GIVE_UP_SECONDS, extra={"gang": key})
                    self._end(key, now)
                elif now - pending.last_evict_at >= REEVICT_SECONDS:
                    pending.last_evict_at = now
                    for ref in pending.evicted.values():
                        self.lifecycle.dispatcher.evict(ref, f"preempted by gang {key} (eviction sent again)")
                continue
            self._reserve(key, pending, now)

    def _drop_stale_holds(self, pending: PendingPreemption) -> None:
        """A victim member deleted after its entry was released may be re-recorded and its slot held for a
        replacement (`hold_for_replacement`); while the preemption is under way, nothing of a victim gang
        that is not bound may hold GPUs inside the domain."""
        nodes = pending.plan.nodes
        for victim in pending.plan.victims:
            entry = self.state.ledger.get(victim.key) if victim.is_gang else None
            if entry is None or any(s.state in (SLOT_BOUND, SLOT_BINDING) for s in entry.slots.values()):
                continue
            if any(s.state == SLOT_RESERVED and (nodes is None or s.node in nodes) for s in entry.slots.values()):
                self.state.ledger.unreserve(victim.key)

    def _reserve(self, key: str, pending: PendingPreemption, now: float) -> None:
        """The victims are gone: reserve the preemptor inside the plan's domain (it heads the queue)."""
        topo, lifecycle = self.state.topology, self.lifecycle
        with offered_only(topo, pending.plan.nodes):
            placement = place(pending.gang, topo, lifecycle.policy)
        head = lifecycle.queue.head_before(key, pending.priority, topo)
        if not placement.placed:
            log.info("gang %s: its preempted room in %s %s is not enough now (%s); back to the queue", key,
                     pending.plan.level, pending.plan.domain, placement.reason, extra={"gang": key})
            self._end(key, now)
            return
        if head is not None:
            from scheduler.service.lifecycle.gang_admission import usage_of

            if delays_head(topo, head, usage_of(placement, topo)):
                return  # a partly bound gang's missing members come first
        entry = self.state.ledger.reserve(placement)
        del self.pending[key]
        lifecycle.reserved(entry, None, f"preemption in {pending.plan.level} {pending.plan.domain}")

    def _end(self, key: str, now: float) -> None:
        self.pending.pop(key, None)
        self.cooldown[key] = now + COOLDOWN_SECONDS

    def row_extra(self, key: str, row: dict) -> None:
        """`GET /gangs`: what a reserved or bound gang preempted to get its room."""
        if key in self.done:
            row["preempted"] = self.done[key]

    # ----- kube-scheduler /preempt and Volcano -------------------------------------------------
    def preempt_verb(self, pod: dict | None, victims: dict[str, list[str]],
                     victim_pods: dict[str, dict]) -> dict[str, list[str]]:
        """`/preempt`: {} for a gang member (meshfit plans and evicts whole gangs itself); for any other pod the
        nodes whose victims evict whole gangs or no gang pod."""
        record = self.state.observe_pending_pod(pod) if isinstance(pod, dict) and pod.get("metadata") else None
        if record is not None and record.member is not None:
            self._preempt_for_member(record)
            return {}
        if record is not None and record.member_error:
            return {}
        kept: dict[str, list[str]] = {}
        with self.state.lock:
            for node, uids in victims.items():
                if uids and self._evicts_whole_gangs(set(uids), victim_pods):
                    kept[node] = list(uids)
        return kept

    def _preempt_for_member(self, record: PodRecord) -> None:
        key, reserved = record.member.gang_key, False
        with self.state.lock:
            if self.state.ledger.get(key) is None and key not in self.lifecycle.rolling_back \
                    and self.may_preempt(key):
                entry, _ = self.lifecycle.try_reserve(record, None)  # fits now, or the unplaced hook preempts
                reserved = entry is not None
                if reserved:
                    self.rank_tables.mark_due(key)
        if reserved:
            self.rank_tables.publish_soon([key])

    def whole_gang_victims(self, uids: list[str], victim_pods: dict[str, dict]) -> list[str]:
        """The victims of a flat list that can go: non-gang pods, and gangs whose running pods all go."""
        chosen = set(uids)
        with self.state.lock:
            return [uid for uid in uids if self._evicts_whole_gangs({uid} | chosen, victim_pods, only=uid)]

    def _evicts_whole_gangs(self, uids: set[str], victim_pods: dict[str, dict], only: str | None = None) -> bool:
        for uid in ([only] if only is not None else uids):
            record = self.state.pod_by_uid(uid)
            if record is None and uid in victim_pods:
                record = self.state.upsert_pod(victim_pods[uid])
            if record is None or record.member is None:
                continue
            running = {r.uid for r in self.state.gang_members(record.member.gang_key) if r.node}
            if not running <= uids:
                return False
        return True
