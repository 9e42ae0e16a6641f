"""What happens to a gang between its first member's filter and its last member's bind, and after.

`GangLifecycle` is driven by `GangScheduler` (decisions under `ClusterState.lock`; cluster calls
through an `ActionDispatcher`, off the lock):

- **Queue** (`scheduler.gangs.queue`): a gang that does not fit, or would delay the queue's head,
  waits there.  `admit_waiting` re-evaluates the queue in order whenever capacity may have freed
  (pods gone, nodes added or repaired, reservations released) and reserves what may start.
- **Prompt members**: once a gang is reserved, meshfit binds its members itself
  (`scheduler.service.binding.gang_binding`, attached to the state machine's `reserved` transition).  A member it
  leaves to kube-scheduler (its fit depends on other objects) and that kube-scheduler may have parked is
  requeued (`ClusterActions.requeue`: nominate the reserved node, touch an annotation): kube-scheduler 1.26
  moves a pod only an extender rejected back on Node add/update and assigned-pod delete events, not when
  another pod is added or bound, so without it such a member waits for the 5-minute flush; 1.35 requeues
  it on any cluster event after its backoff.  Members of a reserved gang not seen since are requeued
  with exponential backoff (2 s doubling to 30 s), a member refused after its last requeue half a second
  later.  Members kube-scheduler is still working through are not touched: no patch storm on a burst.
- **Completion or rollback** (the documented policy): a held slot whose node became unusable
  (deleted, cordoned, NotReady) is moved next to the gang's other members; if it cannot be (pod 0's
  rendezvous node is gone after others were told it), or if the gang is still not fully bound
  `completion_timeout` seconds after its first bind (a member stuck or never recreated), the gang
  is rolled back whole: its bound members are evicted (their controllers recreate them), every
  slot is released, and the gang is placed afresh.  Each step is logged and recorded as a
  Kubernetes Event on the gang's pods.

The class decides what happens to members and keeps their bookkeeping; it builds and wires its collaborators, each
with one job: `GangAdmission` (the queue), `GangRepairs` (moves, releases, rollbacks), `GangPhases` (the state
machine and the rollbacks in progress), `MemberFit` (where members fit besides GPUs) and `GangCalls` (requeues,
evictions and Events).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable

from scheduler.gangs.lifecycle import GangStateMachine
from scheduler.gangs.queue import BACKFILL_EASY, GangQueue
from scheduler.placement.jobs import Gang
from scheduler.placement.result import Placement
from scheduler.gangs.ledger import SLOT_RELEASED, SLOT_RESERVED, Reservation
from scheduler.service.lifecycle.actions import EVENT_NORMAL, EVENT_WARNING, ActionDispatcher, PodRef
from scheduler.cache.pod_record import PodRecord
from scheduler.service.lifecycle.gang_admission import GangAdmission
from scheduler.service.lifecycle.gang_calls import GangCalls, first_ref, pod_ref
from scheduler.service.lifecycle.gang_notices import ReservedNotices
from scheduler.service.lifecycle.gang_phases import GangPhases
from scheduler.service.lifecycle.gang_repairs import GangRepairs
from scheduler.service.lifecycle.gang_rows import gang_counts, gang_rows
from scheduler.service.lifecycle.member_fit import MemberFit, MemberNodes, gang_members
from scheduler.cache.state import ClusterState

log = logging.getLogger("meshfit.gang")

REQUEUE_FIRST_SECONDS = 2.0
REQUEUE_MAX_SECONDS = 30.0
DEFAULT_COMPLETION_TIMEOUT = 300.0


class GangLifecycle:
    """Queue, requeues, completion and rollback of gangs; see the module docstring."""

    def __init__(self, state: ClusterState, dispatcher: ActionDispatcher, policy: str,
                 clock: Callable[[], float], completion_timeout: float = DEFAULT_COMPLETION_TIMEOUT,
                 backfill: str = BACKFILL_EASY) -> None:
        self.state, self.dispatcher, self.policy, self.clock = state, dispatcher, policy, clock
        self.completion_timeout = completion_timeout
        self.queue = GangQueue(backfill=backfill)
        self.seen: dict[str, float] = {}
        """Pod uid -> last time it reached filter or bind."""
        self.turned_away: dict[str, float] = {}
        """Pod uid -> when meshfit last refused it (it may be parked by kube-scheduler)."""
        self.told: dict[str, str] = {}
        """Pod uid -> the last waiting reason recorded as an Event (one Event per change, not per retry)."""
        self.rolling_back: dict[str, set[str]] = {}
        """Gang key -> uids of evicted members still present; the gang is not placed until they are gone."""
        self._last_capacity: tuple = ()
        self._last_pass = 0.0
        self.counters = Counter()
        self.republish: set[str] = set()
        """Gangs (re)reserved since the scheduler last published rank tables (their nodes changed)."""
        self.observe_wait: Callable[[str, float], None] | None = None
        """Called with ("reserved" | "bound", seconds since the gang's first member arrived)."""
        self._logged_wait: dict[str, str] = {}
        """Gang key -> the waiting reason last logged (one info line per change, not per member)."""
        self.upkeep: list[Callable[[float], None]] = []
        """Extra periodic passes (replacement of members on failed nodes, spares, elastic resizing), run by
        `tick` under the lock after the repairs and before the queue pass, with the clock's time."""
        self.unplaced: list[Callable[[Gang, int, Placement], str]] = []
        """Called under the lock when a gang (`Gang`, priority, failed `Placement`) does not fit: a non-empty
        answer (e.g. "preempting gangs ...") replaces the shortfall reason the gang waits with."""
        self.row_extras: list[Callable[[str, dict], None]] = []
        """Called with (gang key, row) for each reserved / bound row of `GET /gangs` to add fields."""
        self.machine = GangStateMachine()
        """Every gang's phase and the named transitions listeners attach to (`scheduler.gangs.lifecycle`)."""
        self.leaves_to_kube: Callable[[PodRecord], bool] = lambda record: True
        """Whether kube-scheduler must bind this member (so a parked one needs a requeue); False for members
        meshfit binds itself (`scheduler.service.binding.gang_binding`)."""
        self.wired: dict[str, tuple[str, str]] = {}
        """Pod uid -> (kind, text) of the refusal kube-scheduler was last given (see `wire_reason`)."""
        self.told_gang: dict[str, str] = {}
        """Gang key -> the waiting reason last recorded as an Event (one Event per gang per change)."""
        self.notices = ReservedNotices(dispatcher, clock)
        """`GangReserved` Events held back until the gang is bound (then folded into `GangBound`) or waits."""
        self.fit = MemberFit(state)
        """Where members fit besides GPUs (`member_nodes`: the direct binder's, once `use_direct_binder` is called)."""
        self.calls = GangCalls(dispatcher, clock, self.counters)
        """Requeues (with each pod's requeue history), evictions and Events for members."""
        self.phases = GangPhases(state, self.queue, self.machine, self.rolling_back)
        """Each gang's phase in `machine`, and the rollbacks in progress."""
        self.repairs = GangRepairs(state, self.queue, policy, clock, completion_timeout, self.fit, self.phases,
                                   self.calls, self.notices, self.turned_away, self.counters, on_reserved=self.reserved)
        """Moves, releases and rollbacks of reserved gangs."""
        self.admission = GangAdmission(state, self.queue, policy, clock, self.fit, self.phases, self.seen,
                                       self.unplaced, on_reserved=self.reserved)
        """The gang queue's admission, and its settings (`place_gang`, `scheduler_names`, the group cycle's)."""

    def use_direct_binder(self, leaves_to_kube: Callable[[PodRecord], bool], bind_backlog: Callable[[], int],
                          member_nodes: MemberNodes, backlog_limit: int) -> None:
        """Members are nominated and bound by meshfit's direct binder: which ones it leaves to kube-scheduler, how
        many Bindings it has in flight (no gang is reserved while they reach `backlog_limit`), and on which nodes a
        member fits besides its GPUs."""
        self.leaves_to_kube = leaves_to_kube
        self.fit.use_direct_binder(member_nodes)
        self.admission.use_direct_binder(bind_backlog, backlog_limit)

    # ----- members ----------------------------------------------------------------------------
    def pod_ref(self, record: PodRecord) -> PodRef:
        """The `PodRef` of a record."""
        return pod_ref(record)

    def arrived(self, record: PodRecord) -> None:
        """A member reached filter or bind (so kube-scheduler is not sitting on it)."""
        self.seen[record.uid] = self.clock()
        self.queue.arrival(record.member.gang_key, self.clock())

    def _observe(self, key: str, what: str) -> None:
        arrival = self.queue.arrivals.get(key)
        if arrival is not None and self.observe_wait is not None:
            self.observe_wait(what, max(self.clock() - arrival[1], 0.0))

    def turned_away_now(self, record: PodRecord, reason: str) -> None:
        """meshfit refused a member: remember it (to requeue it promptly later) and tell it once per reason."""
        self.turned_away[record.uid] = self.clock()
        key = record.member.gang_key
        general = reason.split(" [queue position", 1)[0]
        if self._logged_wait.get(key) != general:
            self._logged_wait[key] = general
            log.info("gang %s waiting: %s", key, reason, extra={"gang": key, "decision": "waiting"})
        if self.told_gang.get(key) != general:  # one Event per gang per change, not per member per retry
            self.told_gang[key] = general
            self.dispatcher.event(self.pod_ref(record), "GangWaiting", reason, EVENT_NORMAL)

    def observe(self, key: str) -> str | None:
        """Record the gang's phase in the state machine (`GangPhases.observe`: its listeners run for the transition)."""
        return self.phases.observe(key)

    def wire_reason(self, record: PodRecord, reason: str) -> str:
        """The refusal text kube-scheduler gets for a member: kept word for word while its kind is unchanged.

        kube-scheduler writes the pod's PodScheduled condition with this text and patches the pod again whenever
        it changes; a reason that restates free GPU counts or queue positions on every retry would cost one
        write per retry.  The kind is the text before its first ':' (and before "behind" for a gang waiting
        behind another); details that move are in the gang's Events and `GET /gangs`."""
        text = reason.split(" [queue position", 1)[0]
        kind = text.split(":", 1)[0].split(" behind ", 1)[0]
        last = self.wired.get(record.uid)
        if last is not None and last[0] == kind:
            return last[1]
        self.wired[record.uid] = (kind, text)
        return text

    def invalid(self, record: PodRecord) -> None:
        """A pod whose gang cannot be read (a typo in a `meshfit.io/*` key, an inconsistent job): it waits, visibly --
        a warning log line and a `GangSpecInvalid` Event, once per pod and error (the filter repeats)."""
        if self.told.get(record.uid) == record.member_error or self.state.pods.get(record.uid) is not record:
            return  # told already, or not a pod the state holds (a forged or stale body never causes a write)
        self.told[record.uid] = record.member_error or ""
        log.warning("pod %s not placed: %s", record.key, record.member_error,
                    extra={"pod": record.key, "decision": "invalid"})
        self.dispatcher.event(self.pod_ref(record), "GangSpecInvalid", record.member_error or "", EVENT_WARNING)

    def members(self, gang_key: str) -> list[PodRecord]:
        """Known members of a gang (call under the lock)."""
        return gang_members(self.state, gang_key)

    # ----- decisions ------------------------------------------------------------------------------
    def reserved(self, entry: Reservation, by: PodRecord | None, how: str) -> None:
        """A gang was reserved: log, tell its pods, and requeue the members kube-scheduler may be parking."""
        self.queue.admitted(entry.gang_key)
        self.republish.add(entry.gang_key)
        self._logged_wait.pop(entry.gang_key, None)
        self.told_gang.pop(entry.gang_key, None)
        if not entry.has_bound():
            self._observe(entry.gang_key, "reserved")
        cost = entry.placement.cost if entry.placement is not None else None
        nodes = sorted({s.node for s in entry.slots.values() if s.state != SLOT_RELEASED})
        detail = (f"{len(entry.gang.pods)} pods x {entry.gang.gpus_per_pod} GPUs reserved on {len(nodes)} node(s) "
                  f"({how})" + (f", predicted step communication {cost.step_comm_seconds:.4g} s" if cost else ""))
        log.info(f"gang {entry.gang_key}: {detail}", extra={"gang": entry.gang_key, "decision": "reserved"})
        members = self.members(entry.gang_key)
        if members:  # its Event is held: a gang bound promptly gets one Event, GangBound, saying both
            self.notices.hold(entry.gang_key, first_ref(members), detail)
        for record in members:
            if record.node:
                continue
            self.told.pop(record.uid, None)
            parked = record.uid in self.turned_away or (by is None and record.uid not in self.seen)
            if parked and (by is None or record.uid != by.uid) and self.leaves_to_kube(record) \
                    and not self.admission.in_group_cycle(record):  # refused before,
                self.calls.requeue(record, entry.node_of(record.member.index))  # or never asked about: may be parked
        self.observe(entry.gang_key)

    def completed(self, entry: Reservation) -> None:
        """Every member is bound: log and tell the pods, once per time the gang becomes whole."""
        if entry.announced_bound:
            return
        entry.announced_bound = True
        self.observe(entry.gang_key)
        self._observe(entry.gang_key, "bound")
        message = f"gang {entry.gang_key}: all {len(entry.gang.pods)} pods bound" + self.notices.bound(entry.gang_key)
        log.info(message, extra={"gang": entry.gang_key, "decision": "bound"})
        self.calls.tell_gang(self.members(entry.gang_key), "GangBound", message)

    def expired(self, keys: list[str]) -> None:
        """Reservations released by their TTL: back to the queue, pods told."""
        for key in keys:
            self.notices.flush(key)
            message = f"gang {key}: reservation expired before any member was bound; released, waiting again"
            log.info(message, extra={"gang": key, "decision": "released"})
            for record in self.members(key):
                self.dispatcher.event(self.pod_ref(record), "GangReservationExpired", message, EVENT_WARNING)

    def log_moved(self, entry: Reservation, record: PodRecord, old: str, why: str = "") -> None:
        """A member's slot moved to a node where it fits: log and tell the pod."""
        new = entry.node_of(record.member.index)
        message = (f"gang {entry.gang_key}: pod {record.name} (index {record.member.index}) moved from node {old} "
                   f"to {new}: " + (f"it no longer fits {old} ({why})" if why else
                                    f"kube-scheduler's own filters reject {old} for it"))
        log.info(message, extra={"gang": entry.gang_key, "decision": "moved"})
        if not why:  # a move before any Binding, off room taken meanwhile, is logged only (no write per move)
            self.notices.flush(entry.gang_key)
            self.dispatcher.event(self.pod_ref(record), "GangMemberMoved", message, EVENT_NORMAL)

    def bind_failed(self, record: PodRecord, error: str) -> None:
        """A bind failed: the slot stays held; requeue the pod soon (kube-scheduler may park it)."""
        log.warning("gang %s: binding pod %s failed: %s", record.member.gang_key, record.key, error,
                    extra={"gang": record.member.gang_key, "decision": "bind-failed"})
        self.turned_away[record.uid] = self.clock()
        self.seen.pop(record.uid, None)

    # ----- admission, repairs and rollbacks (collaborators) -----------------------------------------
    def try_reserve(self, record: PodRecord, offered: frozenset[str] | None) -> tuple[Reservation | None, str]:
        """Place and reserve the gang of `record` if it fits and may start now; else queue it with the reason
        (`GangAdmission.try_reserve`)."""
        return self.admission.try_reserve(record, offered)

    def admit_waiting(self) -> list[str]:
        """One pass over the waiting gangs in order; reserves those that may start now, returns their keys
        (`GangAdmission.admit_waiting`)."""
        return self.admission.admit_waiting()

    def release(self, key: str, message: str) -> None:
        """Release a gang's reservation whole (nothing of it bound), placed afresh by the queue (`GangRepairs`)."""
        self.repairs.release(key, message)

    def rollback(self, entry: Reservation, reason: str) -> None:
        """Roll the gang back whole: evict its bound members, release every slot, place it afresh later
        (`GangRepairs.rollback`)."""
        self.repairs.rollback(entry, reason)

    def evicted_whole(self, key: str, uids: set[str]) -> None:
        """Every bound member of the gang is being deleted by someone else: hold nothing for it, place it afresh once
        they are gone (`GangRepairs.evicted_whole`)."""
        self.repairs.evicted_whole(key, uids)

    def is_rolling_back(self, key: str) -> bool:
        """True while evicted members of the gang's rollback are still present (`GangPhases.is_rolling_back`)."""
        return self.phases.is_rolling_back(key)

    # ----- periodic ---------------------------------------------------------------------------
    def tick(self) -> None:
        """Everything time- or capacity-driven: rollbacks, moves off bad nodes, requeues, the queue."""
        now = self.clock()
        self._forget_gone()
        for key, entry in list(self.state.ledger.entries.items()):
            if entry.status != "bound" and key not in self.rolling_back:
                self.repairs.repair(key, entry, now)
        for key, entry in list(self.state.ledger.entries.items()):
            if entry.status != "bound" and key not in self.rolling_back:
                self._requeue_overdue(entry, now)
        for upkeep in self.upkeep:
            upkeep(now)
        self.admission.enqueue_unasked(now)
        self.notices.write_due()
        capacity = (self.state.generation, self.state.topology.gpus_free, len(self.queue.entries))
        if self.queue.entries and (capacity != self._last_capacity or self.admission.pass_cut_short
                                   or now - self._last_pass > 10.0):
            self._last_capacity, self._last_pass = capacity, now
            self.admit_waiting()
        self.phases.observe_all()

    def _forget_gone(self) -> None:
        self.phases.forget_gone()
        for key in [k for k in self.queue.entries if not any(not r.node for r in self.members(k))]:
            self.queue.forget(key)
        gone = [k for k in self.queue.arrivals if k not in self.state.gang_index and k not in self.state.ledger.entries]
        for key in gone:  # the job is deleted: forget its arrival too (a new job of that name starts afresh)
            self.queue.forget(key)
            self._logged_wait.pop(key, None)
            self.told_gang.pop(key, None)
        known = self.state.pods
        for table in (self.seen, self.turned_away, self.calls.requeued, self.told, self.wired):
            for uid in [u for u in table if u not in known]:
                del table[uid]
        self.admission.forget_gone(known)

    def _requeue_overdue(self, entry: Reservation, now: float) -> None:
        for record in self.members(entry.gang_key):
            if record.node or entry.node_of(record.member.index) is None or not self.leaves_to_kube(record) \
                    or self.admission.in_group_cycle(record):
                continue
            slot = entry.slots[record.member.index]
            if slot.state != SLOT_RESERVED:
                continue
            last, count = self.calls.requeued.get(record.uid, (0.0, 0))
            quiet_since = max(self.seen.get(record.uid, 0.0), last, entry.created_at)
            if record.uid in self.turned_away and self.turned_away[record.uid] >= quiet_since:
                wait = 0.5  # refused after its last requeue: kube-scheduler parks it now, bring it back soon
            else:
                wait = min(REQUEUE_FIRST_SECONDS * 2 ** count, REQUEUE_MAX_SECONDS)
            if now - quiet_since >= wait:
                self.calls.requeue(record, slot.node)

    def counts(self) -> tuple[Counter, Counter]:
        """(gangs by state as in `rows`, waiting gangs by priority), for the metrics (call under the lock)."""
        return gang_counts(self)

    def rows(self) -> list[dict]:
        """`GET /gangs`: waiting gangs in queue order, then reserved / bound ones (call under the lock)."""
        return gang_rows(self)
