"""`GangScheduler`: the decisions behind every verb (filter, prioritize, bind, guard, preempt, place).

Protocol handlers (kube-scheduler extender, Volcano extender, gRPC) only translate wire formats
into calls on this class.  Decisions are made under `ClusterState.lock`; the only call made
outside it is the binder's (an API round trip), during which the slot stays reserved.

The class builds and wires the service's parts: the gang lifecycle (queue, repairs, rollbacks:
`scheduler.service.lifecycle.gang_lifecycle`), preemption, elastic gangs, the rank tables, meshfit's
optional direct binder (`scheduler.service.binding.gang_binding`) and one collaborator per verb:
`FilterVerb` (`/filter`: gang members steered to their reserved nodes, lone GPU pods to nodes with
room), `BindVerb` (`/bind`: the slot marked `binding` under the lock, so nothing can free it mid-call;
a lone GPU pod assumed at bind so a concurrent gang placement can never take the same GPUs),
`RoomGuard` (`/guard`) and `NodeScores` (`/prioritize`).  A lone GPU pod is deliberately *not* a
gang of one: pinning it to one node would fight kube-scheduler's scoring for no topology gain.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from scheduler.gangs.queue import BACKFILL_EASY
from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Placement
from scheduler.gangs.reserve_ops import place_and_reserve
from scheduler.service.lifecycle.actions import ActionDispatcher, ClusterActions, MemoryActions
from scheduler.service.binding.binder import Binder, RankTablePublisher
from scheduler.service.verbs.bind_verb import BindVerb
from scheduler.service.verbs.filter_verb import FilterDecision, FilterVerb
from scheduler.service.verbs.gang_completion import GangCompletion
from scheduler.service.verbs.room_guard import RoomGuard
from scheduler.service.verbs.node_scores import NodeScores
from scheduler.service.binding.binding_wiring import BindingHooks, DirectBinding
from scheduler.service.binding.gang_binding import GangBinding
from scheduler.service.lifecycle.gang_lifecycle import DEFAULT_COMPLETION_TIMEOUT, GangLifecycle
from scheduler.service.lifecycle.elastic import ElasticGangs
from scheduler.service.lifecycle.preemption_flow import PreemptionFlow
from scheduler.service.lifecycle.lone_preemption import LonePreemption
from scheduler.service.binding.ranktables import MemoryRankTables, RankTableTracker
from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState


class GangScheduler:
    """Filter / prioritize / bind / preempt / place over one `ClusterState`, one `Binder` and one
    `RankTablePublisher` (in memory unless given); each verb is answered by its collaborator (`FilterVerb`,
    `BindVerb`, `RoomGuard`, `NodeScores`), wired here."""

    def __init__(self, state: ClusterState, binder: Binder, policy: str = "meshfit",
                 on_placed: Callable[[Placement], None] | None = None,
                 on_expired: Callable[[int], None] | None = None,
                 publisher: RankTablePublisher | None = None,
                 on_publish_failed: Callable[[str, Exception], None] | None = None,
                 actions: ClusterActions | None = None, synchronous_actions: bool = False,
                 completion_timeout: float = DEFAULT_COMPLETION_TIMEOUT, preemption: bool = True,
                 direct_binding: DirectBinding | None = None, backfill: str = BACKFILL_EASY) -> None:
        self.state = state
        self.binder = binder
        self.policy = policy
        state.policy = policy
        self.on_placed = on_placed
        self.on_expired = on_expired
        self.publisher = publisher if publisher is not None else MemoryRankTables()
        self.rank_tables = RankTableTracker(state, self.publisher, on_publish_failed)
        self.actions = actions if actions is not None else MemoryActions()
        self.dispatcher = ActionDispatcher(self.actions, synchronous=synchronous_actions)
        self.lifecycle = GangLifecycle(state, self.dispatcher, policy, state.ledger.clock, completion_timeout,
                                       backfill)
        state.gang_evicted = self.lifecycle.evicted_whole
        self.preemption = PreemptionFlow(state, self.lifecycle, self.rank_tables, enabled=preemption)
        self.lone_preemption = LonePreemption(state, self.lifecycle, self.preemption)
        self.elastic = ElasticGangs(self)
        self.observe_binding: Callable[[str, float, bool], None] = lambda by, seconds, ok: None
        """Called with (who asked: "meshfit" | "kube-scheduler", seconds, succeeded) after each Binding call."""
        self.completion = GangCompletion(state, self.lifecycle, self.rank_tables)
        self.direct: GangBinding | None = None
        """Nominates and binds reserved members itself (`scheduler.service.binding.gang_binding`) when configured."""
        if direct_binding is not None:
            self.direct = GangBinding(state, binder, direct_binding, BindingHooks(
                on_bound=self.completion.publish_if_bound, rolling_back=self.lifecycle.is_rolling_back,
                scheduler_names=self._scheduler_names, on_drained=self.lifecycle.admit_waiting,
                observe=self._observe_direct_binding, re_place=self._re_place_member,
                slots_changed=self.lifecycle.observe), state.ledger.clock,
                synchronous=synchronous_actions)
            for transition in ("reserved", "repaired", "re-placed", "restored"):  # members with slots held
                self.lifecycle.machine.on(transition, self.direct.on_transition)
            self.lifecycle.use_direct_binder(self.direct.leaves_to_kube, self.direct.bind_backlog, self.direct.member_nodes,
                                             direct_binding.backlog_limit)
            state.member_watched = self.direct.member_watched
            state.member_gone = self.direct.member_gone
            state.relisted = self.direct.refresh_all_vacancies
        self.filter_verb = FilterVerb(state, policy, self.lifecycle, self.rank_tables, self.elastic, self.direct,
                                      on_placed=on_placed, run_direct_binds=self.run_direct_binds)
        self.bind_verb = BindVerb(state, binder, self.lifecycle, self.direct, self.completion,
                                  observe=self._observe_kube_binding, run_direct_binds=self.run_direct_binds)
        self.room_guard = RoomGuard(state, self.direct, self._scheduler_names)
        self.node_scores = NodeScores(state)

    def _re_place_member(self, record: PodRecord, reason: str) -> bool:
        """The direct binder's `re_place` hook: `FilterVerb.re_place_member` (the verb is built after the binder)."""
        return self.filter_verb.re_place_member(record, reason)

    def _scheduler_names(self) -> frozenset[str]:
        return self.lifecycle.admission.scheduler_names

    def _observe_direct_binding(self, seconds: float, ok: bool) -> None:
        self.observe_binding("meshfit", seconds, ok)

    def _observe_kube_binding(self, seconds: float, ok: bool) -> None:
        self.observe_binding("kube-scheduler", seconds, ok)

    # ----- housekeeping ----------------------------------------------------------------------
    def sweep(self) -> list[str]:
        """Release expired reservations (gangs with nothing bound); returns the gang keys expired."""
        with self.state.lock:
            expired = self.state.ledger.expire()
            if expired:
                self.lifecycle.expired(expired)
        if expired and self.on_expired is not None:
            self.on_expired(len(expired))
        return expired

    def shutdown(self) -> None:
        """Stop the background threads (the direct binder's wake-ups and pools, the action pool) after their work
        in flight: nothing of this scheduler runs once its service has stopped."""
        if self.direct is not None:
            self.direct.shutdown()
        self.dispatcher.shutdown()

    def tick(self) -> None:
        """The periodic pass (sweeper): expiries, then rollbacks, moves, requeues and the gang queue."""
        self.sweep()
        with self.state.lock:
            self.lifecycle.tick()
            if self.direct is not None:
                self.direct.forget_gone(self.state.pods)
                self.direct.kick_all()
            reserved, self.lifecycle.republish = self.lifecycle.republish, set()
        self.run_direct_binds()
        for key in reserved:
            self.rank_tables.mark_due(key)
        if reserved:
            self.rank_tables.publish_soon(sorted(reserved))

    def run_direct_binds(self) -> None:
        """Synchronous mode (tests): post the Bindings the direct binder queued (no-op otherwise)."""
        if self.direct is not None and self.direct.synchronous:
            self.direct.run_pending()

    def publish_due(self) -> int:
        """Publish every rank table still due (after failures); returns how many failed again."""
        return self.rank_tables.flush()

    # ----- verbs ------------------------------------------------------------------------------
    def filter(self, pod: dict, node_names: list[str], offered_is_complete: bool = True) -> FilterDecision:
        """Release expired reservations, then which offered nodes the pod may use (`FilterVerb`); a gang member gets
        only its reserved node.  `offered_is_complete`: False for Volcano's predicate, asked one node at a time."""
        self.sweep()
        return self.filter_verb.filter(pod, node_names, offered_is_complete)

    def prioritize(self, pod: dict, node_names: list[str]) -> list[tuple[str, int]]:
        """Integer scores 0..10 (`NodeScores`): the reserved node 10 for a gang member; best fit for a GPU pod."""
        return self.node_scores.prioritize(pod, node_names)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Release expired reservations, then bind through the binder with the rank annotations (`BindVerb`); returns
        an error text ("" on success)."""
        self.sweep()
        return self.bind_verb.bind(namespace, name, uid, node)

    def guard(self, pod: dict, node_names: Iterable[str]) -> tuple[list[str] | None, dict[str, str]]:
        """`/guard` (`RoomGuard`): (nodes `pod` may use of `node_names`, refused node -> why); None instead of the
        nodes: every offered node."""
        return self.room_guard.guard(pod, node_names)

    # ----- preempt -----------------------------------------------------------------------------
    def preempt(self, victims: dict[str, list[str]], victim_pods: dict[str, dict] | None = None,
                pod: dict | None = None) -> dict[str, list[str]]:
        """kube-scheduler's `/preempt` for `pod`: see `scheduler.service.lifecycle.preemption_flow` (whole gangs
        only)."""
        return self.preemption.preempt_verb(pod, victims, victim_pods or {})

    def whole_gang_victims(self, uids: list[str], victim_pods: dict[str, dict] | None = None) -> list[str]:
        """The victims of a flat list that can go: non-gang pods, and gangs whose running pods all go."""
        return self.preemption.whole_gang_victims(uids, victim_pods or {})

    # ----- gRPC / Volcano ----------------------------------------------------------------------
    def place(self, gang: Gang, reserve: bool = False) -> Placement:
        """Place a gang (dry run, or reserving it as one ledger entry when `reserve`)."""
        with self.state.lock:
            entry = self.state.ledger.get(gang.key)
            if entry is not None and entry.placement is not None:
                return entry.placement
            if not reserve:
                return place(gang, self.state.topology, self.policy)
            placement, entry = place_and_reserve(self.state.ledger, gang, self.state.topology, self.policy)
        if entry is not None and self.on_placed is not None:
            self.on_placed(placement)
        return placement

    def reservation(self, gang_key: str) -> dict[str, Any] | None:
        """The `/reservations` JSON of one gang, or None."""
        with self.state.lock:
            entry = self.state.ledger.get(gang_key)
            return entry.to_json() if entry is not None else None

    def gangs(self) -> list[dict[str, Any]]:
        """`GET /gangs`: every gang waiting (in queue order, with its position and reason), reserved or bound."""
        with self.state.lock:
            return self.lifecycle.rows()

    def reservations(self) -> list[dict[str, Any]]:
        """Every reservation as `/reservations` JSON."""
        with self.state.lock:
            return self.state.ledger.to_json()
