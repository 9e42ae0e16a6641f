"""`GangBinding`: once a gang is reserved, meshfit binds its members itself -- at once where no pod can race them.

Why (docs/architecture.md, "Binding path"): a reserved gang's members otherwise trickle through kube-scheduler's
single queue one by one, interleaved with every other pod.  meshfit already owns the reservation and posts the
Bindings that carry the rank assignment, so it posts them as soon as the gang is reserved -- but never so that
kube-scheduler could give the room to another pod meanwhile:

1. **Hold.**  From its reservation a member is counted on its node by meshfit (`hold`): by `/guard`, which
   kube-scheduler asks about every pod it places in its own cycle, by `/filter` for lone GPU pods, and by the fit
   checks of the other members.
2. **Bind at once, or nominate first.**  When no pod seen so far may land in the member's room before the Binding
   (`NominationFence.racing_now`: a pending pod that collides with it there -- beside everything else meshfit puts on
   that node -- and was not answered since the hold), the Binding is posted at once -- one write.  Otherwise (or
   with `--always-nominate`) the member's `status.nominatedNodeName` is set to its node first (`Nominator`, one more
   write): kube-scheduler's filters count a nominated pod's requests there for every pod of no higher priority, and
   the member waits at the fence until no pod kube-scheduler may have been placing before it saw the nomination can
   still land there (`scheduler.service.binding.bind_fence`).
3. **Check, then bind.**  Right before the Binding is posted, on the worker, the member's fit is checked again
   against the latest state (`fits`: bound pods, Bindings in flight, nominated pods).  A member that no longer
   fits is not bound: its slot goes back to reserved and it is left to kube-scheduler, whose own filters then
   reject the node and meshfit moves the member to an offered node near its peers (`GangScheduler._unoffered`).
   A member kube-scheduler places itself gets the same check at `/filter` and at `/bind` (`crowded_out`): its
   cache passed the node without meshfit's holds and Bindings there.
4. **Keep a missing member's room.**  A partly bound gang's slot that no pod stands for yet (a deleted member's
   replacement, a member not created yet) keeps its requests counted on its node (`MemberVacancies`).

A member is handled here only when it is safe on its node without kube-scheduler's own filters: a pending pod
the API server reported, of meshfit's scheduler profile, not terminating, its gang consistent, its slot plainly
reserved on a schedulable node, pod 0's node held, the gang not being rolled back, and no inter-pod affinity,
spread constraints, volume claims, host ports or resource claims (`PodNeeds.direct_bind_blocker`).  A member
kube-scheduler filtered in the last `KUBE_GRACE_SECONDS` is left to its own `/bind`.  A Binding in flight marks
the slot `binding`; a failed one puts it back and is retried with backoff; kube-scheduler's `/bind` of a member
being bound here waits for that Binding's outcome (`wait_for`).  Nominations meshfit made for members whose
reservation went elsewhere are cleared.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_RESERVED, Reservation
from scheduler.service.binding.bind_fence import NominationFence
from scheduler.service.binding.binding_posts import BindingPosts, BusyPods
from scheduler.service.binding.binding_wiring import BindingHooks, DirectBinding
from scheduler.service.binding.binder import Binder
from scheduler.service.binding.gang_nominations import GUARD_REASON_PREFIX, GangNominations
from scheduler.service.binding.member_room import member_room
from scheduler.service.binding.member_vacancies import MemberVacancies
from scheduler.service.binding.waker import Waker

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
NOMINATION_WORKERS = 32
"""Nominations are written on workers of their own: never queued behind Bindings (they gate them)."""
PENDING_COALESCE_SECONDS = 0.02
"""After a kick on a watch event of a gang's pending member, the gang's further events within this long make one more."""


class GangBinding(GangNominations, BindingPosts, MemberVacancies):
    """Nominates, fences and binds the reserved members of gangs; see the module docstring."""

    def __init__(self, state: Any, binder: Binder, config: DirectBinding, hooks: BindingHooks,
                 clock: Callable[[], float], synchronous: bool = False) -> None:
        self.state, self.binder, self.config, self.hooks, self.clock = state, binder, config, hooks, clock
        self.fits, self.nominator = config.fits, config.nominator
        self.fence = NominationFence(state, config.collides, clock, config.fence_seconds, hooks.scheduler_names)
        self.synchronous = synchronous
        self._pool = None if synchronous else ThreadPoolExecutor(config.workers, thread_name_prefix="meshfit-bind")
        self._nominations = None if synchronous else ThreadPoolExecutor(NOMINATION_WORKERS,
                                                                        thread_name_prefix="meshfit-nominate")
        self._waker = None if synchronous else Waker(self._wake)
        self.closed = False
        """True once `shutdown` ran: wake-ups start nothing."""
        self.in_flight: dict[str, Future] = {}
        """Pod uid -> the outcome ("" or an error text) of the Binding this binder is posting for it."""
        self.in_flight_requests: dict[str, dict[str, Any]] = {}
        """Node -> requests of this binder's Bindings in flight there (not yet in `state.requested`)."""
        self.posting: dict[str, tuple[str, PodRecord]] = {}
        """Pod uid -> (node, record) of a Binding in flight counted in `in_flight_requests`: until its call returns or
        the watch shows the pod bound (`member_watched`), whichever comes first."""
        self.nominating: dict[str, str] = {}
        """Pod uid -> the node a nomination write in flight names."""
        self.nominated: dict[str, tuple[str, float, str | None]] = {}
        """Pod uid -> (node, when, the pod's resourceVersion after the write) of the last nomination this binder wrote
        and the API server accepted."""
        self.kube_handling: dict[str, float] = {}
        """Pod uid -> when kube-scheduler was last told this member's node (it is binding it itself)."""
        self.kube_told: dict[str, str] = {}
        """Pod uid -> the node kube-scheduler was told at `/filter` for this member (it assumed it there; its `/bind`
        follows)."""
        self.holds: dict[str, tuple[str, PodRecord]] = {}
        """Pod uid -> (node, record) of members counted on a node before the API shows them there: nominated by this
        binder, or assumed by kube-scheduler (`hold`)."""
        self.told_on: dict[str, set[str]] = {}
        """Node -> uids of `kube_told` members told that node (the index `_kube_assumed` reads)."""
        self.busy = BusyPods(self.in_flight, self.holds)
        self.kicked_at: dict[str, float] = {}
        """Gang key -> when a watch event of a pending member last led to an immediate `kick` (`member_pending`)."""
        self.retry_at: dict[str, tuple[float, int, tuple]] = {}
        """Pod uid -> (not before, failures so far, pod fingerprint at the last failure)."""
        self.refused: dict[str, str] = {}
        """Pod uid -> why it is left to kube-scheduler (logged once per reason)."""
        self.moved_at: dict[str, float] = {}
        """Pod uid -> when this binder last moved its slot because it no longer fitted its node."""
        self.counts = {"bound": 0, "failed": 0, "conflicts": 0, "nominated": 0, "nominate_failed": 0,
                       "nominate_skipped": 0, "no_longer_fit": 0, "cleared": 0, "unnominated": 0}
        self._pending_sync: list[Callable[[], None]] = []
        self._init_vacancies()

    # ----- decisions (under the state lock) ------------------------------------------------------------------
    def kick(self, gang_key: str) -> int:
        """Nominate or bind the members of `gang_key` that are ready; returns how many Bindings started.

        All or nothing: while no member is bound or binding, no Binding starts until every pending member meshfit
        binds is ready (unraced, or nominated and past the fence; fitting its node), so a member whose room was taken
        is moved before any of its peers is bound.  Once some member is bound, the others bind as each gets ready."""
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
        return sum(self._start(record, entry) for record in ready)

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
        refused_for_fit = self.refused.get(record.uid, "").startswith(FIT_PREFIXES)
        kube_binds_it = record.uid in self.kube_told  # kube-scheduler was told its node: its /bind follows
        if record.node or record.terminating or member is None or record.uid in self.in_flight \
                or (self.leaves_to_kube(record) and not refused_for_fit) or kube_binds_it:
            return False
        slot = entry.slots.get(member.index)
        return slot is not None and slot.state == SLOT_RESERVED

    def kick_all(self) -> int:
        """`kick` every gang with a plainly reserved slot, and clear stale nominations (the periodic pass)."""
        self._clear_stale_nominations()
        self._drop_stale_holds()
        self._forget_old_binds()
        self.refresh_all_vacancies()
        keys = [key for key, entry in self.state.ledger.entries.items()
                if any(s.state == SLOT_RESERVED for s in entry.slots.values())]
        return sum(self.kick(key) for key in keys)

    def member_watched(self, record: PodRecord) -> None:
        """The watch reported a gang member (under the lock): a pending one may be nominated or bound
        (`member_pending`); a bound one is counted in `state.requested` from now on, so its Binding in flight or hold
        stops counting on its node (counted in both, its peers saw its room taken twice and did not fit beside it)."""
        if not record.node:
            self.member_pending(record)
            return
        if record.uid in self.posting:  # kube-scheduler's cache may not count it yet: `counts_unseen` until then
            self.state.recent_binds[record.node] = self.clock()
        self.binding_landed(record.uid)
        if record.uid in self.holds:
            self.let_go(record.uid)

    def member_pending(self, record: PodRecord) -> None:
        """The watch reported a pending member (under the lock): nominate or bind it if its gang is reserved.  The
        gang is asked about at once, and then once more on the wake-up thread for all the events of a burst that arrive
        within `PENDING_COALESCE_SECONDS` (a kick per event walked every member of the gang per event of any of
        them)."""
        if record.member is None:
            return
        key, now = record.member.gang_key, self.clock()
        if self._waker is None or now - self.kicked_at.get(key, -1e18) >= PENDING_COALESCE_SECONDS:
            self.kicked_at[key] = now  # the first event of a while is acted on at once (kube-scheduler may pop the
            self.kick(key)             # member meanwhile and bind it itself, writing an Event meshfit does not)
        else:
            self._wake_later(key, PENDING_COALESCE_SECONDS)

    def on_transition(self, gang_key: str, _from: str, _to: str) -> None:
        """A gang's slots were (re)held (`reserved`, `repaired`, `re-placed`, `restored`): start on its members."""
        self.refresh_vacancies(gang_key)
        self.kick(gang_key)

    def leaves_to_kube(self, record: PodRecord) -> bool:
        """True when this binder will not bind `record` (kube-scheduler must; requeue it if it may be parked)."""
        needs = record.needs
        return needs is None or bool(getattr(needs, "direct_bind_blocker", "")) or record.uid in self.refused

    def member_nodes(self, record: PodRecord) -> dict[str, int] | None:
        """Node -> GPUs members asking what `record` asks can use there besides their other requests (None: its needs
        are unknown); see `scheduler.service.binding.member_room`."""
        if record.needs is None or getattr(record.needs, "direct_bind_blocker", ""):
            return None
        busy = self._busy()
        return member_room(record, self.state.topology.node_by_name,
                           lambda name, extra: self.fits(record, name, extra, busy),
                           lambda name: self._others_on(name, record))

    def crowded_out(self, record: PodRecord, node: str) -> str:
        """kube-scheduler's filters passed `record` (a member it is placing itself) on its reserved `node`: "" when it
        also fits there beside what meshfit holds, binds, just bound or keeps for missing members -- which
        kube-scheduler's cache cannot count yet -- else why not, after its slot was moved where it fits when it could
        be (`BindingHooks.re_place`).  Call under the lock."""
        reason = self.fits(record, node, self._others_on(node, record), self._busy())
        if not reason.startswith(GUARD_REASON_PREFIX):
            return ""
        moved = self.hooks.re_place(record, reason)
        return f"{reason} beside gang members meshfit holds or binds there" + ("; moved" if moved else "")

    def bind_backlog(self) -> int:
        """Members this binder has taken on and not yet seen bound: Bindings in flight, and members held on their node
        (nominated by meshfit, or assumed by kube-scheduler with its `/bind` to come); the two never overlap
        (`hold`)."""
        return len(self.in_flight) + len(self.holds)

    def _may_bind(self, record: PodRecord, entry: Reservation) -> bool:
        member = record.member
        if (record.node or record.terminating or not record.from_watch or record.member_error or member is None
                or record.needs is None or record.uid in self.in_flight):
            return False
        slot = entry.slots.get(member.index)
        if slot is None or slot.state != SLOT_RESERVED or slot.pod not in (None, record.name):
            return False
        now = self.clock()
        if now - self.kube_handling.get(record.uid, -1e18) < KUBE_GRACE_SECONDS:
            return False
        retry = self.retry_at.get(record.uid)
        if retry is not None and (now < retry[0] or (retry[2] and retry[2] == record.fingerprint)):
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
            if self.refused.get(record.uid) != reason:
                self.refused[record.uid] = reason
                log.info("gang %s: pod %s is left to kube-scheduler: %s", member.gang_key, record.name, reason,
                         extra={"gang": member.gang_key, "decision": "left-to-kube-scheduler"})
            return False
        self.refused.pop(record.uid, None)
        if record.nominated != slot.node:
            if self.config.always_nominate or record.uid in self.kube_told or not self._unraced(record, slot.node):
                self._nominate(record, slot.node)
                return False
            return True  # bound at once: its Binding is what kube-scheduler sees first
        self.hold(record, slot.node)
        wait = self.fence.wait_seconds(record, slot.node, *self._fence_view(slot.node, record))
        if wait > 0:
            self._wake_later(member.gang_key, wait)
            return False
        return True

    def _unraced(self, record: PodRecord, node: str) -> bool:
        """Whether `record` may be bound on `node` at once, without a nomination first: held there from now on (so
        `/guard`, `/filter` and the other members count it), and no pod seen so far may land there against it
        (`NominationFence.racing_now`).  A pod kube-scheduler places after this asks `/guard` first."""
        self.hold(record, node)
        return not self.fence.racing_now(record, node, *self._fence_view(node, record))

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
        return self.fits(record, node, self._others_on(node, record), self._busy())

    # ----- what the Bindings in flight take ----------------------------------------------------------------------
    def _others_on(self, node: str, record: PodRecord) -> dict[str, Any]:
        """`in_flight_requests` on `node` without `record`'s own share: its requests when it is held or binding there,
        or the vacancy counted for its slot there while no pod stood for it (`MemberVacancies`)."""
        counted = self.in_flight_requests.get(node, {})
        held = self.holds.get(record.uid)
        own = record.needs.requests if (held is not None and held[0] == node) or record.uid in self.posting else {}
        vacancy = self.vacancy_of(record, node)
        if not own and not vacancy:
            return counted
        return {r: v - own.get(r, 0) - vacancy.get(r, 0) for r, v in counted.items()}

    def _busy(self) -> BusyPods:
        """Uids whose requests `in_flight_requests` counts (this binder's Bindings in flight, held members)."""
        return self.busy

    def _add_in_flight(self, node: str, record: PodRecord, sign: int) -> None:
        self._count_on(node, record.needs.requests, sign)
        if sign > 0 and record.member is not None:
            self._vacate(record)  # its own requests are counted there now, not its slot's vacancy

    def _count_on(self, node: str, requests: dict[str, Any], sign: int) -> None:
        """Add (`sign` +1) or take back (-1) `requests` on `node` in `in_flight_requests`."""
        used = self.in_flight_requests.setdefault(node, {})
        for resource, value in requests.items():
            used[resource] = used.get(resource, 0) + sign * value
        if all(not v for v in used.values()):
            self.in_flight_requests.pop(node, None)

    # ----- wake-ups -------------------------------------------------------------------------------------------
    def _wake_later(self, gang_key: str, seconds: float) -> None:
        """Ask again about `gang_key` in `seconds` (the periodic pass does it in synchronous mode)."""
        if self._waker is not None and gang_key:
            self._waker.at(gang_key, seconds)

    def _wake(self, gang_key: str) -> None:
        with self.state.lock:
            if not self.closed:  # a wake-up due after `shutdown` has nothing left to start
                self.kick(gang_key)

    # ----- kube-scheduler's /bind of a member in flight here ------------------------------------------------------
    def wait_for(self, uid: str, timeout: float) -> str | None:
        """The outcome of this binder's Binding of pod `uid` ("" bound, else the error); None when none is in flight."""
        future = self.in_flight.get(uid)
        if future is None:
            return None
        try:
            return future.result(timeout)
        except Exception as exc:  # noqa: BLE001 - timeout: report, kube-scheduler retries
            return f"meshfit's own binding of this pod did not finish in {timeout:.0f} s: {exc!r}"

    def forget_gone(self, known: dict) -> None:
        """Drop bookkeeping of pods (and gangs) no longer known (call under the lock)."""
        for key in [k for k in self.kicked_at if k not in self.state.gang_index]:
            del self.kicked_at[key]
        for uid in [u for u in self.holds if u not in known]:
            self.let_go(uid)
        for table in (self.kube_handling, self.retry_at, self.refused, self.fence.seen, self.fence.passed,
                      self.fence.noticed, self.moved_at):
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
        if self._pool is not None:
            self._nominations.shutdown(wait=True)
            self._pool.shutdown(wait=True)
