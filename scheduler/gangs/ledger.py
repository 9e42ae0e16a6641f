"""The gang reservation ledger: assume -> commit or discard, one atomic entry per gang.

A reservation holds every not-yet-bound pod slot of a gang on its node *inside the topology*
(key `resv:<ns>/<gang>/<index>`), so "free capacity minus all reservations" is simply the
topology's free count and any placement made against it can never over-commit.  A slot goes
reserved -> binding (the Binding call is in flight; nothing may free it) -> bound (the pod's own
holding, kept by `scheduler.cache.state.ClusterState`, replaces the reservation's in the same critical
section); a failed bind puts it back to reserved.  Unreserve is idempotent.

The gang guarantee lives here: a TTL (refreshed whenever a member makes progress) releases only
gangs with *no* member bound or binding.  Once one member is bound, every other slot stays held
while the gang exists -- a deleted member's slot is kept for its replacement, on the same node --
and the gang is either completed or rolled back whole by `GangScheduler` (see
`scheduler.service.lifecycle.gang_lifecycle`), never left partly bound by a timer.

Once a member binds, its `meshfit.io/*` annotations fix what every later member must agree with:
the rendezvous address (pod 0's node) and the rank order.  The entry keeps that as `given`
(`GivenRendezvous`), noted at bind and recovered from the bound pods' annotations after a restart,
so members re-placed later (restart, TTL expiry, deleted pod) keep pod 0 where the others expect it.

The ledger has no lock of its own: `ClusterState` calls it under its single lock.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from scheduler.placement.jobs import Gang
from scheduler.placement.result import Placement
from scheduler.gangs.rendezvous import GivenRendezvous
from topology.model import ClusterTopology, TopologyError

DEFAULT_TTL_SECONDS = 120.0

SLOT_RESERVED = "reserved"
SLOT_BINDING = "binding"
SLOT_BOUND = "bound"
SLOT_RELEASED = "released"

STATUS_RESERVED = "reserved"
STATUS_PARTIAL = "partial"
STATUS_BOUND = "bound"


def reservation_key(gang_key: str, index: int) -> str:
    """Topology holding key of one reserved pod slot."""
    return f"resv:{gang_key}/{index}"


@dataclass
class Slot:
    """One pod index of a reserved gang: its node, GPUs, state and (once seen) the pod's name."""

    index: int
    node: str
    gpus: int
    state: str = SLOT_RESERVED
    pod: str | None = None


@dataclass
class Reservation:
    """A gang's ledger entry: its placement (None when rebuilt from bound pods) and its slots."""

    gang: Gang
    slots: dict[int, Slot]
    created_at: float
    expires_at: float | None
    placement: Placement | None = None
    signature: tuple | None = None
    """What every member must agree on (see `scheduler.gangs.membership.membership_signature`)."""
    given: GivenRendezvous | None = None
    """The rendezvous the first bound member was given (see the module docstring)."""
    given_conflict: str = ""
    """Why bound members were given rendezvous that disagree ("" when they agree)."""
    bound_since: float | None = None
    """When the first member was bound (None while none is): completion deadlines count from here."""
    announced_bound: bool = False
    """The "all pods bound" milestone was logged / recorded for the gang as it stands (reset when one is lost)."""
    pinned_by: set[str] = field(default_factory=set)
    """Uids of members meshfit evicted to replace them, bound with `given` and still present (terminating): their
    processes may still run with that rendezvous, so pod 0 stays on it until they are gone, as if they were bound."""
    elastic: dict | None = None
    """Elastic gangs: `{"min_dp", "max_dp", "dp", "generation"}` (set by `scheduler.service.lifecycle.elastic`;
    published in the rank table so launchers can follow resizes); None for a fixed-size gang."""

    @property
    def gang_key(self) -> str:
        """`namespace/name` of the gang."""
        return self.gang.key

    @property
    def status(self) -> str:
        """`bound` when every slot is bound, `reserved` while all are held, else `partial`."""
        states = {slot.state for slot in self.slots.values()}
        if len(self.slots) == len(self.gang.pods) and states == {SLOT_BOUND}:
            return STATUS_BOUND
        if len(self.slots) == len(self.gang.pods) and SLOT_RELEASED not in states:
            return STATUS_RESERVED
        return STATUS_PARTIAL

    def reserved_slots(self) -> list[Slot]:
        """Slots still held by the reservation (not bound, not released; binding ones included)."""
        return [s for s in self.slots.values() if s.state in (SLOT_RESERVED, SLOT_BINDING)]

    def has_bound(self) -> bool:
        """True while some member is bound or being bound, or an evicted one told the rendezvous is still present
        (`pinned_by`): the gang can no longer just expire."""
        return bool(self.pinned_by) or any(s.state in (SLOT_BOUND, SLOT_BINDING) for s in self.slots.values())

    def bound_count(self) -> int:
        """Members bound so far."""
        return sum(1 for s in self.slots.values() if s.state == SLOT_BOUND)

    def missing_indices(self) -> list[int]:
        """Pod indices that hold nothing: never reserved, or released."""
        return [i for i in range(len(self.gang.pods))
                if i not in self.slots or self.slots[i].state == SLOT_RELEASED]

    def node_of(self, index: int) -> str | None:
        """The node slot `index` holds (reserved or bound), or None."""
        slot = self.slots.get(index)
        return slot.node if slot is not None and slot.state != SLOT_RELEASED else None

    def bound_given(self) -> GivenRendezvous | None:
        """`given` while some member is bound or being bound (a Binding in flight has told its pod the rendezvous
        already: only pods told constrain the rest), else None."""
        if self.given is None or not self.has_bound():
            return None
        return self.given

    def to_json(self) -> dict:
        """`{"gang", "status", "pods": {pod: node}, "nodes": [node or null by pod index], "expires_at"}` for
        `GET /reservations`."""
        pods = {}
        for index in sorted(self.slots):
            slot = self.slots[index]
            if slot.state != SLOT_RELEASED:
                pods[slot.pod or self.gang.pods[index].name] = slot.node
        nodes = [self.node_of(i) for i in range(len(self.gang.pods))]
        return {"gang": self.gang_key, "status": self.status, "pods": pods, "nodes": nodes,
                "expires_at": None if self.has_bound() else self.expires_at}


class ReservationLedger:
    """Gang key -> reservation, holding reserved slots in a topology; TTL from an injectable clock."""

    def __init__(self, topo: ClusterTopology, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.topo = topo
        self.ttl_seconds = float(ttl_seconds)
        self.clock = clock
        self.entries: dict[str, Reservation] = {}
        self.expired_total = 0
        self._next_expiry = math.inf
        """No entry with reserved slots expires before this (a lower bound, exact after each scan)."""
        self.normalize_given: Callable[[Reservation, GivenRendezvous], GivenRendezvous] | None = None
        """Maps a member's stated rendezvous before `note_given` compares it (`scheduler.service.lifecycle.elastic`)."""

    # ----- assume / commit / discard ---------------------------------------------------------
    def reserve(self, placement: Placement, indices: list[int] | None = None) -> Reservation:
        """Hold the placed gang's slots (all, or `indices` of an existing entry) atomically."""
        gang = placement.gang
        entry = self.entries.get(gang.key)
        now = self.clock()
        if entry is None:
            entry = Reservation(gang, {}, now, now + self.ttl_seconds, placement)
        todo = list(range(len(gang.pods))) if indices is None else list(indices)
        added: list[int] = []
        try:
            for i in todo:
                node = placement.pod_nodes[i]
                self.topo.add_pod(reservation_key(gang.key, i), node, gang.gpus_per_pod)
                added.append(i)
        except TopologyError:
            for i in added:
                self.topo.remove_pod(reservation_key(gang.key, i))
            raise
        for i in todo:
            old = entry.slots.get(i)
            entry.slots[i] = Slot(i, placement.pod_nodes[i], gang.gpus_per_pod, SLOT_RESERVED,
                                  old.pod if old else None)
        entry.expires_at = now + self.ttl_seconds
        self._next_expiry = min(self._next_expiry, entry.expires_at)
        if entry.placement is None or indices is None:
            entry.placement = placement
        self.entries[gang.key] = entry
        return entry

    def mark_binding(self, gang_key: str, index: int, pod: str, given: GivenRendezvous | None = None) -> bool:
        """Slot `index` is being bound by `pod` (Binding in flight): no expiry or move may free it.  `given` is the
        rendezvous that Binding carries: from now on pod 0 stays where it says (see `bound_given`)."""
        entry = self.entries.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        if slot is None or slot.state != SLOT_RESERVED:
            return False
        self.note_given(gang_key, given)
        slot.state, slot.pod = SLOT_BINDING, pod
        return True

    def unmark_binding(self, gang_key: str, index: int) -> None:
        """The Binding failed: the slot is plainly reserved again (still held)."""
        entry = self.entries.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        if slot is not None and slot.state == SLOT_BINDING:
            slot.state = SLOT_RESERVED
            self.touch(gang_key)

    def mark_bound(self, gang_key: str, index: int, pod: str, node: str) -> bool:
        """Convert slot `index` from reserved to bound by `pod` on `node`; False if no such reservation."""
        entry = self.entries.get(gang_key)
        if entry is None:
            return False
        slot = entry.slots.get(index)
        if slot is None:
            return False
        self.topo.remove_pod(reservation_key(gang_key, index))
        slot.state, slot.pod, slot.node = SLOT_BOUND, pod, node
        if entry.bound_since is None:
            entry.bound_since = self.clock()
        return True

    def touch(self, gang_key: str) -> None:
        """A member made progress (filtered onto its slot, bound): push the gang's TTL back."""
        entry = self.entries.get(gang_key)
        if entry is not None and entry.expires_at is not None:
            entry.expires_at = self.clock() + self.ttl_seconds
            self._next_expiry = min(self._next_expiry, entry.expires_at)

    def note_given(self, gang_key: str, given: GivenRendezvous | None) -> None:
        """Remember the rendezvous a bound member was given; a disagreeing one is kept as `given_conflict`."""
        entry = self.entries.get(gang_key)
        if entry is None or given is None:
            return
        if self.normalize_given is not None:
            given = self.normalize_given(entry, given)
        if entry.given is None or entry.bound_given() is None:
            entry.given, entry.given_conflict = given, ""
        elif not entry.given.agrees_with(given) and not entry.given_conflict:
            entry.given_conflict = (f"bound members were given different rendezvous: {entry.given.describe()} "
                                    f"vs {given.describe()}")

    def note_pod(self, gang_key: str, index: int, pod: str) -> None:
        """Remember which pod fills slot `index` (for listings and bind checks)."""
        entry = self.entries.get(gang_key)
        if entry is not None and index in entry.slots and entry.slots[index].pod is None:
            entry.slots[index].pod = pod

    def release_slot(self, gang_key: str, index: int) -> bool:
        """Release slot `index` outright (its pod finished); drop the entry once nothing is held."""
        entry = self.entries.get(gang_key)
        if entry is None or index not in entry.slots:
            return False
        self.topo.remove_pod(reservation_key(gang_key, index))
        entry.slots[index].state = SLOT_RELEASED
        if all(s.state == SLOT_RELEASED for s in entry.slots.values()):
            del self.entries[gang_key]
        elif not entry.has_bound() and entry.expires_at is not None:  # its TTL applies again
            self._next_expiry = min(self._next_expiry, entry.expires_at)
        return True

    def hold_for_replacement(self, gang_key: str, index: int) -> bool:
        """A member pod was deleted: keep its slot held (same node when it still has room) for the pod its
        controller recreates; released instead when nothing else of the gang is bound (it may just expire).
        Returns True when the slot is held."""
        entry = self.entries.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        if slot is None or slot.state == SLOT_RELEASED:
            return False
        others_bound = any(s.state in (SLOT_BOUND, SLOT_BINDING) for i, s in entry.slots.items() if i != index)
        if entry.status == STATUS_BOUND:  # a whole gang lost a member: its completion deadline counts from now,
            entry.bound_since = self.clock()  # not from its first bind hours ago
            entry.announced_bound = False
        if slot.state == SLOT_BOUND:
            slot.state = SLOT_RELEASED
            node = self.topo.node_by_name.get(slot.node)
            if others_bound and node is not None and node.gpus_free >= slot.gpus:
                self.topo.add_pod(reservation_key(gang_key, index), slot.node, slot.gpus)
                slot.state = SLOT_RESERVED
        slot.pod = None
        if all(s.state == SLOT_RELEASED for s in entry.slots.values()):
            del self.entries[gang_key]
            return False
        if not entry.has_bound():  # nothing bound any more: the held slots live under a TTL again
            entry.bound_since = None
            if entry.expires_at is None:
                entry.expires_at = self.clock() + self.ttl_seconds
            self._next_expiry = min(self._next_expiry, entry.expires_at)
        return slot.state != SLOT_RELEASED

    def unreserve(self, gang_key: str) -> bool:
        """Release every reserved slot and forget the entry (idempotent; bound pods keep their own holds)."""
        entry = self.entries.pop(gang_key, None)
        if entry is None:
            return False
        for slot in entry.slots.values():
            self.topo.remove_pod(reservation_key(gang_key, slot.index))
        return True

    def expire(self, now: float | None = None) -> list[str]:
        """Release every gang past its TTL that has no member bound or binding; returns the gang keys.

        Called on every filter and bind: it returns at once until the earliest deadline of any
        reservation has passed (`reserve`, `touch` and `hold_for_replacement` set deadlines and keep
        that bound low enough), and only then scans the entries, recomputing the bound.  A gang with a
        bound member never expires here: it is completed or rolled back whole by the scheduler.
        """
        now = self.clock() if now is None else now
        if now < self._next_expiry:
            return []
        expired, next_expiry = [], math.inf
        for key, entry in list(self.entries.items()):
            if entry.expires_at is None or not entry.reserved_slots() or entry.has_bound():
                continue
            if entry.expires_at > now:
                next_expiry = min(next_expiry, entry.expires_at)
                continue
            expired.append(key)
            self.unreserve(key)
        self._next_expiry = next_expiry
        self.expired_total += len(expired)
        return expired

    # ----- topology rebuilds and restarts --------------------------------------------------
    def attach(self, topo: ClusterTopology) -> list[str]:
        """Re-hold every reserved slot in a rebuilt topology; returns the gangs that lost a slot's node.

        A gang with nothing bound is unreserved whole (placed afresh later); a gang with bound members
        loses only the slots on vanished nodes (the scheduler re-places them next to the bound ones).
        """
        self.topo = topo
        dropped = []
        for key, entry in list(self.entries.items()):
            lost = [slot for slot in entry.reserved_slots() if slot.node not in topo.node_by_name]
            if lost:
                dropped.append(key)
            if lost and not entry.has_bound():
                del self.entries[key]
                continue
            for slot in entry.reserved_slots():
                if slot in lost:
                    if slot.state == SLOT_RESERVED:
                        slot.state = SLOT_RELEASED
                else:
                    topo.add_pod(reservation_key(key, slot.index), slot.node, slot.gpus)
        return dropped

    def record_bound(self, gang: Gang, index: int, pod: str, node: str) -> Reservation:
        """Create or extend an entry for a pod found already bound (start-up rebuild; holds nothing).  A pod past
        an existing entry's size (an elastic gang's dropped replica, still terminating) is not added to it."""
        entry = self.entries.get(gang.key)
        if entry is not None and index >= len(entry.gang.pods):
            return entry
        if entry is None:
            entry = Reservation(gang, {}, self.clock(), None)
            self.entries[gang.key] = entry
        self.topo.remove_pod(reservation_key(gang.key, index))
        entry.slots[index] = Slot(index, node, gang.gpus_per_pod, SLOT_BOUND, pod)
        if entry.bound_since is None:
            entry.bound_since = self.clock()
        return entry

    # ----- queries ---------------------------------------------------------------------------
    def get(self, gang_key: str) -> Reservation | None:
        """The entry of one gang, or None."""
        return self.entries.get(gang_key)

    def counts(self) -> dict[str, int]:
        """Number of entries per status."""
        counts = {STATUS_RESERVED: 0, STATUS_PARTIAL: 0, STATUS_BOUND: 0}
        for entry in self.entries.values():
            counts[entry.status] += 1
        return counts

    def to_json(self) -> list[dict]:
        """Every entry, sorted by gang key."""
        return [self.entries[k].to_json() for k in sorted(self.entries)]
