"""Preemption for GPU pods of meshfit's profile that are not in a gang ("lone" pods), decided by meshfit.

kube-scheduler's `DefaultPreemption` runs a dry run over every node for each pod of the profile that no node can take.
For gang members that work is wasted (meshfit preempts whole gangs itself,
`scheduler.service.lifecycle.preemption_flow`), and at 5,000 nodes it is most of kube-scheduler's time in a burst;
so meshfit's shipped profile turns the plugin off and meshfit preempts for lone GPU pods too, by the same rules as
for gangs:

- **When.** Every tick, for lone GPU pods of meshfit's profile that are pending, not `preemptionPolicy: Never`, have
  waited `WAIT_SECONDS` and find no schedulable node with their GPUs free in meshfit's view (gang reservations held):
  the highest priority first, `PLANNED_PER_TICK` at most, each at most every `RETRY_SECONDS`, and only while some
  holder of lower priority exists (a burst of equal priorities costs nothing).
- **What.** `scheduler.gangs.preemption.plan_preemption` with the pod as a gang of one: whole gangs and lone GPU pods of
  strictly lower priority, cheapest first, in the smallest domain that frees a node for it.  Victims are evicted as
  `PreemptionFlow` evicts them (a victim gang whole, rolled back); Events `Preempted` / `GangPreempted` on the victims,
  `Preempting` on the pod.
- **Then.** Once the victims are gone, the pod's GPUs are held on one node of the plan's domain (the topology holding
  `lone_hold_key`, so no gang is reserved there) and the pod is nominated there and requeued
  (`ActionDispatcher.requeue`): kube-scheduler tries its nominated node first, and its filters count a nominated pod's
  requests for pods of equal or lower priority.  `GangScheduler`'s lone-pod filter counts the hold as the pod's own.
  The hold ends when the pod is bound (anywhere), gone, or after `HOLD_SECONDS`.

Limits: meshfit preempts for GPUs; a lone pod short of CPU or memory alone is not helped (it waits for room).  Pods
without GPUs in meshfit's profile do not preempt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.membership import default_parallelism
from scheduler.gangs.preemption import PreemptionPlan, plan_preemption
from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, JobSpecError, PodSlot
from scheduler.placement.offered import offered_only
from scheduler.service.lifecycle.actions import EVENT_NORMAL, PodRef
from scheduler.service.lifecycle.preemption_flow import GIVE_UP_SECONDS, NEVER, POD, REEVICT_SECONDS
from topology.k8s import FINISHED_PHASES
from topology.model import ClusterTopology, TopologyError

log = logging.getLogger("meshfit.preemption")

WAIT_SECONDS = 2.0
"""A lone pod is preempted for only after it has waited this long without room (a burst's room may be freeing)."""
PLANNED_PER_TICK = 8
"""Lone pods planned for per tick (highest priority first)."""
RETRY_SECONDS = 5.0
"""A lone pod is planned for at most this often."""
HOLD_SECONDS = 300.0
"""How long the freed GPUs are held for the pod before they are given back (it may plan again)."""
RENOMINATE_SECONDS = 5.0
"""A held pod whose nomination the watch does not show is nominated again at most this often."""


def lone_hold_key(namespace: str, name: str) -> str:
    """The topology holding that keeps a lone pod's freed GPUs for it until it is bound."""
    return f"lone:{namespace}/{name}"


def held_for(topo: ClusterTopology, record: PodRecord) -> tuple[str, int] | None:
    """(node, GPUs) meshfit holds for lone pod `record` after preempting for it; None when it holds nothing."""
    held = topo.pods.get(lone_hold_key(record.namespace, record.name))
    if held is None:
        return None
    return topo.nodes[held[0]].name, held[1]


def lone_gang(record: PodRecord) -> Gang:
    """The pod as a gang of one (what the planner and the engine place)."""
    return Gang(record.namespace, record.name, (PodSlot(0, record.name, record.gpus),),
                parallelism=default_parallelism(1, record.gpus), priority=record.priority)


def free_for(topo: ClusterTopology, record: PodRecord, node_name: str) -> int:
    """GPUs free on `node_name` for lone pod `record`: the node's free GPUs plus what meshfit holds there for it."""
    node = topo.node_by_name[node_name]
    held = held_for(topo, record)
    return node.gpus_free + (held[1] if held is not None and held[0] == node_name else 0)


def release_hold(topo: ClusterTopology, record: PodRecord) -> None:
    """Give back what meshfit holds for lone pod `record` (it is being bound: its own holding takes over)."""
    topo.remove_pod(lone_hold_key(record.namespace, record.name))


@dataclass
class LonePending:
    """A preemption for one lone pod: its plan, the victims' pods not yet gone, and the node held once they are."""

    uid: str
    ref: PodRef
    priority: int
    plan: PreemptionPlan
    started_at: float
    evicted: dict[str, PodRef] = field(default_factory=dict)
    last_evict_at: float = 0.0
    held_node: str = ""
    held_at: float = 0.0
    requeued_at: float = 0.0


class LonePreemption:
    """Plans, evicts and follows preemptions for lone GPU pods of meshfit's profile; see the module docstring."""

    def __init__(self, state: Any, lifecycle: Any, flow: Any) -> None:
        self.state, self.lifecycle, self.flow = state, lifecycle, flow
        self.pending: dict[str, LonePending] = {}
        """Pod key (`namespace/name`) -> the preemption under way for it."""
        self.waiting_since: dict[str, float] = {}
        """Pod uid -> when it was first seen pending without room."""
        self.tried: dict[str, float] = {}
        """Pod uid -> when it was last planned for."""
        lifecycle.upkeep.append(self.upkeep)

    def upkeep(self, now: float) -> None:
        """Every tick, under the lock: follow the preemptions under way, then plan for lone pods without room."""
        for key in list(self.pending):
            self._follow(key, self.pending[key], now)
        if self.flow.enabled:
            self._plan(now)

    # ----- planning ----------------------------------------------------------------------------
    def _waiting(self, now: float) -> list[PodRecord]:
        """Lone GPU pods of meshfit's profile that have waited `WAIT_SECONDS` with no node free for them."""
        names, found, seen = self.lifecycle.admission.scheduler_names, [], set()
        lone = [r for r in self.state.pods.values()
                if r.member is None and not r.node and r.gpus > 0 and not r.terminating
                and r.phase not in FINISHED_PHASES and r.scheduler_name in names and r.preemption_policy != NEVER
                and f"{r.namespace}/{r.name}" not in self.pending]
        biggest = max((n.gpus_free for n in self.state.topology.nodes if n.schedulable), default=0) if lone else 0
        for record in lone:
            if record.gpus <= biggest:
                continue  # some node has its GPUs free: kube-scheduler places it (or its other resources are short)
            seen.add(record.uid)
            since = self.waiting_since.setdefault(record.uid, now)
            if now - since >= WAIT_SECONDS and now - self.tried.get(record.uid, -RETRY_SECONDS) >= RETRY_SECONDS:
                found.append(record)
        for uid in [u for u in self.waiting_since if u not in seen]:
            del self.waiting_since[uid]
            self.tried.pop(uid, None)
        return sorted(found, key=lambda r: (-r.priority, self.waiting_since[r.uid], r.namespace, r.name))

    def _plan(self, now: float) -> None:
        waiting = self._waiting(now)
        if not waiting:
            return
        holders = self.flow.holders(exclude="")
        lowest = min((h.priority for h in holders if h.preemptible), default=None)
        for record in waiting[:PLANNED_PER_TICK]:
            self.tried[record.uid] = now
            if lowest is None or lowest >= record.priority:
                continue  # nothing of lower priority to evict
            try:
                gang = lone_gang(record)
                plan = plan_preemption(self.state.topology, gang, record.priority, holders, self.lifecycle.policy)
            except (JobSpecError, TopologyError, ValueError) as exc:
                log.warning("pod %s/%s: no preemption plan: %s", record.namespace, record.name, exc)
                continue
            if plan is not None:
                self._carry_out(record, plan, now)
                holders = self.flow.holders(exclude="")  # the victims are no longer candidates

    def _carry_out(self, record: PodRecord, plan: PreemptionPlan, now: float) -> None:
        """Evict every victim whole and follow the preemption until the pod is held a node."""
        key = f"{record.namespace}/{record.name}"
        ref = PodRef(record.namespace, record.name, record.uid)
        pending = LonePending(record.uid, ref, record.priority, plan, now, last_evict_at=now)
        self.pending[key] = pending
        pending.evicted = self.flow.evict_victims(plan, f"pod {key}", record.priority)
        names = ", ".join(f"{v.key} (priority {v.priority})" for v in plan.victims)
        message = (f"pod {key} (priority {record.priority}, {record.gpus} GPUs) preempts {names} in {plan.level} "
                   f"{plan.domain}: {plan.victim_gpus} GPUs freed; nominated there once they are gone")
        log.warning(message, extra={"decision": "preempting", "domain": plan.domain, "pod": key})
        self.lifecycle.dispatcher.event(ref, "Preempting", message, EVENT_NORMAL)
        self.flow.count(plan, POD)

    # ----- follow-up ---------------------------------------------------------------------------
    def _follow(self, key: str, pending: LonePending, now: float) -> None:
        record = self.state.pod_by_uid(pending.uid)
        if record is None or record.node or record.terminating or record.phase in FINISHED_PHASES:
            self._end(key, pending)  # bound (anywhere) or gone: the hold, if any, is no longer needed
            return
        if pending.held_node:
            hold = lone_hold_key(record.namespace, record.name)
            if hold not in self.state.topology.pods and pending.held_node in self.state.topology.node_by_name:
                self.state.topology.add_pod(hold, pending.held_node, record.gpus)  # a rebuilt topology lost it
            if now - pending.held_at > HOLD_SECONDS:
                log.info("pod %s: not bound %.0f s after its room on %s was freed; the room is given back", key,
                         HOLD_SECONDS, pending.held_node)
                self._end(key, pending)
            elif record.nominated != pending.held_node and now - pending.requeued_at >= RENOMINATE_SECONDS:
                pending.requeued_at = now  # kube-scheduler clears a nomination after a failed attempt: write it again
                self.lifecycle.dispatcher.requeue(pending.ref, pending.held_node)
            return
        pending.evicted = {uid: ref for uid, ref in pending.evicted.items() if uid in self.state.pods}
        if pending.evicted:
            if now - pending.started_at > GIVE_UP_SECONDS:
                log.warning("pod %s: %d preempted pod(s) still present after %.0f s; preemption dropped", key,
                            len(pending.evicted), GIVE_UP_SECONDS)
                self._end(key, pending)
            elif now - pending.last_evict_at >= REEVICT_SECONDS:
                pending.last_evict_at = now
                for ref in pending.evicted.values():
                    self.lifecycle.dispatcher.evict(ref, f"preempted by pod {key} (eviction sent again)")
            return
        self._hold(key, pending, record, now)

    def _hold(self, key: str, pending: LonePending, record: PodRecord, now: float) -> None:
        """The victims are gone: hold the pod's GPUs on a node of the plan's domain and nominate it there."""
        topo = self.state.topology
        with offered_only(topo, pending.plan.nodes):
            placement = place(lone_gang(record), topo, self.lifecycle.policy)
        if not placement.placed:
            log.info("pod %s: its preempted room in %s %s is taken again (%s); it may plan again", key,
                     pending.plan.level, pending.plan.domain, placement.reason)
            self._end(key, pending)
            return
        node = placement.pod_nodes[0]
        topo.add_pod(lone_hold_key(record.namespace, record.name), node, record.gpus)
        pending.held_node, pending.held_at, pending.requeued_at = node, now, now
        self.lifecycle.dispatcher.requeue(pending.ref, node)

    def _end(self, key: str, pending: LonePending) -> None:
        self.pending.pop(key, None)
        namespace, _, name = key.partition("/")
        self.state.topology.remove_pod(lone_hold_key(namespace, name))
        self.tried.pop(pending.uid, None)
