"""`GangBinding`: once a gang is reserved, meshfit binds its members itself -- at once where no pod can race them.

Why (docs/architecture.md, "Binding path"): a reserved gang's members otherwise trickle through kube-scheduler's
single queue one by one, interleaved with every other pod.  meshfit already owns the reservation and posts the
Bindings that carry the rank assignment, so it posts them as soon as the gang is reserved -- but never so that
kube-scheduler could give the room to another pod meanwhile.  Every count of room is a claim of the one room ledger
(`scheduler.cache.room_ledger`), and every fit is answered by one function over it (`RoomCheck`):

1. **Hold.**  From its reservation a member is claimed `held` on its node (`MemberHolds`): `/guard`, `/filter` for
   lone GPU pods (`RoomAnswers`) and the fit checks of the other members count it.
2. **Bind at once, or nominate first.**  When no pod seen so far may land in the member's room before the Binding
   (`NominationFence.racing_now`), the Binding is posted at once -- one write.  Otherwise (or with
   `--always-nominate`) the member's `status.nominatedNodeName` is written first (`NominationWriter`, one more write)
   and the member waits at the fence (`scheduler.service.binding.bind_fence`).
3. **Check, then bind.**  Right before the Binding is posted, on the worker, the member's fit is checked again
   (`BindingPoster`).  A member that no longer fits is not bound: it is left to kube-scheduler, whose own filters then
   reject the node, and meshfit moves it.  A member kube-scheduler places itself gets the same check at `/filter` and
   `/bind` (`crowded_out`).
4. **Keep a missing member's room.**  A partly bound gang's slot no pod stands for keeps a `reserved` claim on its
   node (`MemberVacancies`).

A member is handled here only when it is safe on its node without kube-scheduler's own filters: a pending pod the API
server reported, of meshfit's scheduler profile, not terminating, its gang consistent, its slot plainly reserved on a
schedulable node, pod 0's node held, the gang not being rolled back, and no inter-pod affinity, spread constraints,
volume claims, host ports or resource claims (`PodNeeds.direct_bind_blocker`).  A member kube-scheduler filtered in
the last `KUBE_GRACE_SECONDS` is left to its own `/bind`.  This class decides (under the state lock); its
collaborators, wired here, each own one part.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_RESERVED, Reservation
from scheduler.service.binding.bind_fence import NominationFence
from scheduler.service.binding.binder import Binder
from scheduler.service.binding.binding_posts import BindingPoster
from scheduler.service.binding.binding_wiring import BindingHooks, DirectBinding
from scheduler.service.binding.member_holds import MemberHolds
from scheduler.service.binding.member_room import member_room
from scheduler.service.binding.member_vacancies import MemberVacancies
from scheduler.service.binding.nominations import NominationWriter
from scheduler.service.binding.retries import BindRetries
from scheduler.service.binding.room_answers import GUARD_REASON_PREFIX, RoomAnswers
from scheduler.service.binding.waker import Waker
from scheduler.service.binding.workers import BindingWorkers

log = logging.getLogger("meshfit.bind")

KUBE_GRACE_SECONDS = 5.0
"""A member kube-scheduler filtered onto its node is left to kube-scheduler's `/bind` this long."""
FIT_PREFIXES = ("insufficient ", "node ", "untolerated taint")
"""Refusals about the node (not the pod itself): the member can be moved to another node."""
MISSING_GRACE_SECONDS = 3.0
"""How long a reserved gang's first Binding waits for pods its controller has not created yet (a burst's pods arrive
within it; a member created later than that binds into the slot held for it)."""
MOVE_SETTLE_SECONDS = 1.0
"""A member moved off a node whose room was taken is not moved again sooner (its new nomination must land first)."""
PENDING_COALESCE_SECONDS = 0.02
"""After a kick on a watch event of a gang's pending member, the gang's further events within this long make one more."""


class GangBinding:
    """Decides when the reserved members of gangs are nominated, held and bound; see the module docstring."""

    def __init__(self, state: Any, binder: Binder, config: DirectBinding, hooks: BindingHooks,
                 clock: Callable[[], float], synchronous: bool = False) -> None:
        self.state, self.binder, self.config, self.hooks, self.clock = state, binder, config, hooks, clock
        self.fit = config.fit
        self.counts = {"bound": 0, "failed": 0, "conflicts": 0, "nominated": 0, "nominate_failed": 0,
                       "nominate_skipped": 0, "no_longer_fit": 0, "cleared": 0, "unnominated": 0}
        self.fence = NominationFence(state, config.fit, clock, config.fence_seconds, hooks.scheduler_names)
        self.synchronous = synchronous
        self.workers = BindingWorkers(config.workers, synchronous)
        self.retries = BindRetries(clock)
        self.holds = MemberHolds(state, self.fence, clock)
        self.vacancies = MemberVacancies(state)
        self.answers = RoomAnswers(state, config.fit, self.fence)
        self.posts = BindingPoster(state, binder, config.fit, self.holds, self.workers, self.retries, hooks,
                                   self.counts, self.vacancies)
        self.nominations = NominationWriter(state, config.nominator, self.holds, self.workers, self.retries,
                                            self.counts, clock, self.member_pending, self._wake_later,
                                            self.posts.in_flight.__contains__)
        self._waker = None if synchronous else Waker(self._wake)
        self.closed = False
        """True once `shutdown` ran: wake-ups start nothing."""
        self.kicked_at: dict[str, float] = {}
        """Gang key -> when a watch event of a pending member last led to an immediate `kick` (`member_pending`)."""
        self.moved_at: dict[str, float] = {}
        """Pod uid -> when this binder last moved its slot because it no longer fitted its node."""

    # ----- what the rest of the service calls -------------------------------------------------------------------
    @property
    def in_flight(self) -> dict:
        """Pod uid -> the outcome of the Binding posted for it (`BindingPoster.in_flight`)."""
        return self.posts.in_flight

    @property
    def refused(self) -> dict[str, str]:
        """Pod uid -> why it is left to kube-scheduler."""
        return self.retries.refused

    @property
    def nominator(self) -> Any:
        """What nominations are written with."""
        return self.config.nominator

    def kick(self, gang_key: str) -> int:
        """Nominate or bind the members of `gang_key` that are ready; returns how many Bindings started.

        All or nothing: while no member is bound or binding, no Binding starts until every pending member meshfit
        binds is ready (unraced, or nominated and past the fence; fitting its node), so a member whose room was taken
        is moved before any of its peers is bound.  Once some member is bound, the others bind as each gets ready.
        Then the gang's vacancies are counted afresh: what it held, started binding, moved or released changes which
        of its slots no pod stands for."""
        started = self._kick(gang_key)
        self.vacancies.refresh(gang_key)
        if started:  # slots marked binding: the lifecycle sees the gang's phase now, not at its next pass
            self.hooks.slots_changed(gang_key)
        return started

    def _kick(self, gang_key: str) -> int:
        entry = self.state.ledger.get(gang_key)
        if entry is None or self.hooks.rolling_back(gang_key) or entry.node_of(0) is None:
            return 0
        ready, waiting = [], self._missing_members(entry)
        for record in list(self.state.gang_index.get(gang_key, {}).values()):
            if self._may_bind(record, entry):
                ready.append(record)
            elif self._holds_back(record, entry):
                waiting = True
        if waiting and not entry.has_bound():
            return 0
        return sum(self.posts.start(record, entry) for record in ready)

    def gate_open(self, record: PodRecord) -> bool:
        """Whether `record` (a member kube-scheduler is binding) may be bound now: some member of its gang is bound or
        binding already, or no other member this binder binds is still getting ready (call under the lock)."""
        entry = self.state.ledger.get(record.member.gang_key)
        if entry is None or entry.has_bound():
            return True
        if self._missing_members(entry):
            return False
        return not any(self._holds_back(other, entry) for other in self.state.gang_index.get(entry.gang_key, {}).values()
                       if other.uid != record.uid)

    def kick_all(self) -> int:
        """The periodic pass: clear stale nominations and holds, age bound claims, recount vacancies, `kick` every gang
        with a plainly reserved slot."""
        self.nominations.clear_stale()
        self.holds.drop_stale()
        self.state.room.age_unseen()
        self.vacancies.refresh_all()
        keys = [key for key, entry in self.state.ledger.entries.items()
                if any(s.state == SLOT_RESERVED for s in entry.slots.values())]
        return sum(self.kick(key) for key in keys)

    def member_watched(self, record: PodRecord) -> None:
        """The watch reported a gang member (under the lock): a pending one may be nominated or bound
        (`member_pending`); a bound one is claimed bound by the state already, so a hold on it ends."""
        if not record.node:
            self.member_pending(record)
        else:
            self.holds.let_go(record.uid)
        if record.member is not None:  # bound, nominated, finished: which of its gang's slots no pod stands for changed
            self.vacancies.refresh(record.member.gang_key)
            self.hooks.slots_changed(record.member.gang_key)  # and its phase may have too (bound by kube-scheduler)

    def member_pending(self, record: PodRecord) -> None:
        """The watch reported a pending member (under the lock): nominate or bind it if its gang is reserved.  The
        gang is asked about at once, and then once more on the wake-up thread for all the events of a burst that arrive
        within `PENDING_COALESCE_SECONDS`."""
        if record.member is None:
            return
        key, now = record.member.gang_key, self.clock()
        if self._waker is None or now - self.kicked_at.get(key, -1e18) >= PENDING_COALESCE_SECONDS:
            self.kicked_at[key] = now  # the first event of a while is acted on at once (kube-scheduler may pop the
            self.kick(key)             # member meanwhile and bind it itself, writing an Event meshfit does not)
        else:
            self._wake_later(key, PENDING_COALESCE_SECONDS)

    def member_gone(self, record: PodRecord) -> None:
        """A gang member's pod went (under the lock): an unfinished one's room stays claimed for its replacement; the
        gang's vacancies are recounted."""
        self.vacancies.member_gone(record)

    def refresh_vacancies(self, gang_key: str) -> None:
        """Claim exactly the vacancies `gang_key` has now (under the lock)."""
        self.vacancies.refresh(gang_key)

    def refresh_all_vacancies(self) -> None:
        """`refresh_vacancies` for every gang that has or may have one."""
        self.vacancies.refresh_all()

    def on_transition(self, gang_key: str, _from: str, _to: str) -> None:
        """A gang's slots were (re)held (`reserved`, `repaired`, `re-placed`, `restored`): start on its members."""
        self.vacancies.refresh(gang_key)
        self.kick(gang_key)

    def note_kube_handling(self, record: PodRecord) -> None:
        """kube-scheduler is asking about this member now: it may bind it through `/bind` itself."""
        self.holds.note_kube_handling(record)

    def kube_assumes(self, record: PodRecord, node: str) -> None:
        """kube-scheduler was told `node` for this member: it assumes the member there and binds it through `/bind`;
        its peers no longer wait for it (a gang reserved at this `/filter` binds now)."""
        self.holds.assume(record, node)
        if record.member is not None:
            self.kick(record.member.gang_key)

    def kube_let_go(self, record: PodRecord) -> None:
        """kube-scheduler is done with this member (bound, refused, or its `/bind` returned): no longer assumed, it may
        leave a vacancy of its gang."""
        self.holds.kube_let_go(record)
        if record.member is not None:
            self.vacancies.refresh(record.member.gang_key)

    def answer_lone(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """`/filter` for a lone GPU pod (`RoomAnswers.answer_lone`)."""
        self.answers.answer_lone(record, nodes, failed)

    def answer_guard(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """`/guard` (`RoomAnswers.answer_guard`)."""
        self.answers.answer_guard(record, nodes, failed)

    def lone_crowded_out(self, record: PodRecord, node: str) -> str:
        """`/bind` of a lone GPU pod (`RoomAnswers.lone_crowded_out`)."""
        return self.answers.lone_crowded_out(record, node)

    def counts_unseen(self, node: str) -> bool:
        """True when the room ledger counts room on `node` kube-scheduler's cache may not count yet."""
        return self.answers.counts_unseen(node)

    def leaves_to_kube(self, record: PodRecord) -> bool:
        """True when this binder will not bind `record` (kube-scheduler must; requeue it if it may be parked)."""
        needs = record.needs
        return needs is None or bool(getattr(needs, "direct_bind_blocker", "")) or record.uid in self.retries.refused

    def member_nodes(self, record: PodRecord) -> dict[str, int] | None:
        """Node -> GPUs members asking what `record` asks can use there besides their other requests (None: its needs
        are unknown); see `scheduler.service.binding.member_room`."""
        if record.needs is None or getattr(record.needs, "direct_bind_blocker", ""):
            return None
        return member_room(record, self.state.topology.node_by_name,
                           lambda name, extra: self.fit.fits(record, name, extra))

    def crowded_out(self, record: PodRecord, node: str) -> str:
        """kube-scheduler's filters passed `record` (a member it is placing itself) on its reserved `node`: "" when it
        also fits there in meshfit's view -- what meshfit holds, binds, just bound or keeps for missing members, which
        kube-scheduler's cache cannot count yet -- else why not, after its slot was moved where it fits when it could
        be (`BindingHooks.re_place`).  Call under the lock."""
        reason = self.fit.fits(record, node)
        if not reason.startswith(GUARD_REASON_PREFIX):
            return ""
        moved = self.hooks.re_place(record, reason)
        return f"{reason} beside gang members meshfit holds or binds there" + ("; moved" if moved else "")

    def bind_backlog(self) -> int:
        """Members this binder has taken on and not yet seen bound: Bindings in flight, and members held or assumed on
        their node (one claim each, so never both)."""
        return len(self.posts.in_flight) + self.holds.count()

    def wait_for(self, uid: str, timeout: float) -> str | None:
        """The outcome of this binder's Binding of pod `uid` ("" bound, else the error); None when none is in flight."""
        return self.posts.wait_for(uid, timeout)

    def run_pending(self) -> None:
        """Synchronous mode (tests): run the writes `kick` queued, outside the state lock."""
        self.workers.run_pending()

    # ----- one member ----------------------------------------------------------------------------------------------
    def _missing_members(self, entry: Reservation) -> bool:
        """True while some slot of the gang has no live pod yet (its controller is still creating them), for at most
        `MISSING_GRACE_SECONDS` after the reservation: a pod created later than that binds into its held slot alone."""
        live = {r.member.index for r in self.state.gang_index.get(entry.gang_key, {}).values()
                if r.member is not None and not r.terminating}
        if all(index in live for index in entry.slots):
            return False
        left = entry.created_at + MISSING_GRACE_SECONDS - self.clock()
        if left > 0:
            self._wake_later(entry.gang_key, left)
        return left > 0

    def _holds_back(self, record: PodRecord, entry: Reservation) -> bool:
        """True for a pending member this binder will bind once it is ready (it holds its unbound gang back)."""
        member = record.member
        refused_for_fit = self.retries.refused.get(record.uid, "").startswith(FIT_PREFIXES)
        if record.node or record.terminating or member is None or record.uid in self.posts.in_flight \
                or (self.leaves_to_kube(record) and not refused_for_fit) or self.holds.assumed(record.uid):
            return False  # kube-scheduler was told an assumed member's node: its /bind follows
        slot = entry.slots.get(member.index)
        return slot is not None and slot.state == SLOT_RESERVED

    def _may_bind(self, record: PodRecord, entry: Reservation) -> bool:
        member = record.member
        if (record.node or record.terminating or not record.from_watch or record.member_error or member is None
                or record.needs is None or record.uid in self.posts.in_flight):
            return False
        slot = entry.slots.get(member.index)
        if slot is None or slot.state != SLOT_RESERVED or slot.pod not in (None, record.name):
            return False
        now = self.clock()
        if now - self.holds.kube_handling.get(record.uid, -1e18) < KUBE_GRACE_SECONDS:
            return False
        if self.retries.waiting(record, now):
            return False
        reason = self._refusal(record, entry, slot.node)
        if reason.startswith(FIT_PREFIXES):
            settle = self.moved_at.get(record.uid, -1e18) + MOVE_SETTLE_SECONDS - now
            if settle > 0:  # just moved: let its new nomination reach kube-scheduler before moving it again
                self._wake_later(member.gang_key, settle)
                return False
            if self.hooks.re_place(record, reason):
                self.moved_at[record.uid] = now
                return False  # moved to a node where it fits (or its unbound gang released): asked again there
        if reason:
            if self.retries.refused.get(record.uid) != reason:
                self.retries.refused[record.uid] = reason
                log.info("gang %s: pod %s is left to kube-scheduler: %s", member.gang_key, record.name, reason,
                         extra={"gang": member.gang_key, "decision": "left-to-kube-scheduler"})
            return False
        self.retries.refused.pop(record.uid, None)
        if record.nominated != slot.node:
            if self.config.always_nominate or self.holds.assumed(record.uid) or not self._unraced(record, slot.node):
                self.nominations.nominate(record, slot.node)
                return False
            return True  # bound at once: its Binding is what kube-scheduler sees first
        self.holds.hold(record, slot.node)
        wait = self.fence.wait_seconds(record, slot.node)
        if wait > 0:
            self._wake_later(member.gang_key, wait)
            return False
        return True

    def _unraced(self, record: PodRecord, node: str) -> bool:
        """Whether `record` may be bound on `node` at once, without a nomination first: held there from now on (so
        `/guard`, `/filter` and the other members count it), and no pod seen so far may land there against it
        (`NominationFence.racing_now`).  A pod kube-scheduler places after this asks `/guard` first."""
        self.holds.hold(record, node)
        return not self.fence.racing_now(record, node)

    def _refusal(self, record: PodRecord, entry: Reservation, node: str) -> str:
        blocker = getattr(record.needs, "direct_bind_blocker", "")
        if blocker:
            return blocker
        if record.scheduler_name not in self.hooks.scheduler_names():
            return f"its schedulerName {record.scheduler_name!r} is not meshfit's profile"
        if entry.signature is not None and record.signature() != entry.signature:
            return "it disagrees with the gang's reservation"
        topo_node = self.state.topology.node_by_name.get(node)
        if topo_node is None or not topo_node.schedulable:
            return f"node {node} is not schedulable"
        return self.fit.fits(record, node)

    # ----- wake-ups and shutdown ---------------------------------------------------------------------------------
    def _wake_later(self, gang_key: str, seconds: float) -> None:
        """Ask again about `gang_key` in `seconds` (the periodic pass does it in synchronous mode)."""
        if self._waker is not None and gang_key:
            self._waker.at(gang_key, seconds)

    def _wake(self, gang_key: str) -> None:
        with self.state.lock:
            if not self.closed:  # a wake-up due after `shutdown` has nothing left to start
                self.kick(gang_key)

    def forget_gone(self, known: dict) -> None:
        """Drop bookkeeping of pods (and gangs) no longer known (call under the lock)."""
        for key in [k for k in self.kicked_at if k not in self.state.gang_index]:
            del self.kicked_at[key]
        self.holds.forget_gone(known)
        self.retries.forget_gone(known)
        for table in (self.fence.seen, self.fence.passed, self.fence.noticed, self.moved_at):
            for uid in [u for u in table if u not in known]:
                del table[uid]

    @property
    def waking(self) -> bool:
        """True while the wake-up thread runs (until `shutdown`; never in synchronous mode)."""
        return self._waker is not None and self._waker.running

    def shutdown(self) -> None:
        """Stop the wake-ups, then the worker pools after the Bindings already started (idempotent)."""
        with self.state.lock:
            self.closed = True
        if self._waker is not None:
            self._waker.stop()
        self.workers.shutdown()


