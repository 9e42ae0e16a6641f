"""Elastic gangs in the service: start at the largest size that fits, shrink on failure, grow when room frees.

`ElasticGangs` hooks into `GangLifecycle` (see docs/elastic.md for the rules):

- **Start**: `place` (the lifecycle admission's `place_gang`) tries dp = max, max-1, ... min and reserves the first
  that fits; the reservation's gang *is* the active size (pods `0 .. dp*pods_per_replica - 1`).
- **Beyond the size**: a member whose index is at or past the active size is refused at filter with
  "elastic gang g runs at dp=6 of 4..16; this pod waits for room to grow" (`beyond_size`), and any such
  pod still bound (a dropped replica) is evicted.
- **Shrink** (upkeep): a gang with bound members and members that could not be re-placed (no room, no
  spare) drops its highest `ceil(missing / pods_per_replica)` replicas: their reserved slots are
  released and their bound pods evicted; the missing members that stay inside the smaller size take the
  GPUs those pods free (the lifecycle's repair re-places them at the head of the queue).  Below min the
  gang is rolled back whole.
- **Grow** (upkeep): a fully bound gang below max, with the pods of its next replicas pending and no other
  waiting gang of higher or equal priority, reserves as many more whole replicas as fit next to it.
- Every resize bumps the table's `elastic.generation`, republishes the rank table, records a
  `GangResized` Event and a log line, and counts `meshfit_elastic_resizes_total{direction}`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from scheduler.gangs.elastic import ElasticRange, place_largest, resized_gang, shrink_target
from scheduler.placement.engine import place as engine_place
from scheduler.placement.jobs import JobSpecError, Parallelism
from scheduler.gangs.membership import gang_from_membership
from scheduler.placement.result import PLACED, Placement
from scheduler.gangs.ledger import (
    SLOT_BINDING, SLOT_BOUND, SLOT_RESERVED, STATUS_BOUND, GivenRendezvous, Reservation, reservation_key,
)
from scheduler.gangs.reserve_ops import reserve_remaining
from scheduler.service.lifecycle.actions import EVENT_NORMAL, EVENT_WARNING

log = logging.getLogger("meshfit.elastic")

REEVICT_SECONDS = 30.0
"""A pod beyond its gang's size that is still bound this long after its eviction is evicted again."""


class ElasticGangs:
    """Start / shrink / grow of elastic gangs for one `GangScheduler` (see the module docstring)."""

    def __init__(self, scheduler: Any) -> None:
        self.state, self.lifecycle, self.policy = scheduler.state, scheduler.lifecycle, scheduler.policy
        self.dispatcher = scheduler.dispatcher
        self.observe: Callable[[str], None] | None = None
        """Called with "shrink" / "grow" at every resize (the metrics counter)."""
        self.evicted: dict[str, float] = {}
        """Pod uid -> when it was evicted for being beyond its gang's size."""
        self._grow_tried: dict[str, tuple] = {}
        """Gang key -> the capacity fingerprint of the last failed grow (no retry until it changes)."""
        self._grown_at: dict[str, tuple[float, int]] = {}
        """Gang key -> (when, dp before) of a grow whose new members are not all bound yet."""
        self._no_grow_until: dict[str, float] = {}
        """Gang key -> no grow before this time (after a grow whose members did not bind)."""
        self._whole_at: dict[str, int] = {}
        """Gang key -> the table generation last seen fully bound (republished once per generation, however the
        last member's binding became known: its bind call, or only the watch after a bind call that failed)."""
        self._placed: dict[str, Placement] = {}
        """Gang key -> the sized placement `place` last returned (its entry is fresh, not rebuilt after a restart)."""
        self.lifecycle.admission.place_gang = self.place
        self.lifecycle.upkeep.append(self.upkeep)
        self.lifecycle.row_extras.append(self.row_extra)
        self.state.ledger.normalize_given = self.normalize_given
        scheduler.rank_tables.elastic_of = self.table_section

    # ----- lookups -------------------------------------------------------------------------------
    def range_of(self, gang_key: str) -> ElasticRange | None:
        """The elastic range the gang's known members declare (None: not elastic, or no member known)."""
        for record in self.state.gang_index.get(gang_key, {}).values():
            if record.member is not None:
                return record.member.elastic
        return None

    def active_dp(self, entry: Reservation, elastic: ElasticRange) -> int:
        """The gang's current data-parallel degree (its reserved size)."""
        return len(entry.gang.pods) // elastic.pods_per_replica

    def beyond_size(self, member: Any, entry: Reservation | None) -> str:
        """Why a member must wait because it is outside its gang's reserved size ("" when it is not)."""
        elastic = getattr(member, "elastic", None)
        if entry is not None and elastic is not None and entry.elastic is None:
            self._adopt(entry, elastic)  # before a pod can bind past the size of a gang rebuilt after a restart
        if entry is None or member.index < len(entry.gang.pods):
            return ""
        if elastic is None:  # a fixed-size gang's pod past its reservation: its pods disagree on the size
            return (f"pod index {member.index} is outside gang {member.gang_key} as reserved "
                    f"({len(entry.gang.pods)} pods); its pods disagree on the gang size")
        return (f"elastic gang {member.gang_key} runs at {elastic.describe(self.active_dp(entry, elastic))}; "
                f"this pod (index {member.index}) waits for room to grow")

    def table_section(self, entry: Reservation) -> dict | None:
        """The rank table's `elastic` section (call under the lock); set on first use for a new reservation."""
        elastic = self.range_of(entry.gang_key)
        if elastic is not None and entry.elastic is None:
            self._adopt(entry, elastic)
        return dict(entry.elastic) if entry.elastic is not None else None

    def row_extra(self, gang_key: str, row: dict) -> None:
        """`GET /gangs`: `elastic: "dp=6 of 4..16"` on an elastic gang's row."""
        entry, elastic = self.state.ledger.get(gang_key), self.range_of(gang_key)
        if entry is not None and elastic is not None:
            row["elastic"] = elastic.describe(self.active_dp(entry, elastic))

    def normalize_given(self, entry: Reservation, given: GivenRendezvous) -> GivenRendezvous:
        """A member bound at another size states another dp: read it as the current one (nothing else may differ)."""
        if entry.elastic is None:
            return given
        mine = entry.gang.parallelism
        try:
            theirs = Parallelism.parse(given.parallelism)
        except JobSpecError:
            return given
        return replace(given, parallelism=str(mine)) if replace(theirs, dp=mine.dp) == mine else given

    # ----- start ---------------------------------------------------------------------------------
    def place(self, gang: Any, topo: Any, policy: str) -> Placement:
        """The lifecycle's placer: an elastic gang at the largest dp in its range that fits, else as declared."""
        elastic = self.range_of(gang.key)
        if elastic is None or len(gang.pods) != elastic.pods_at(elastic.max_dp):
            return engine_place(gang, topo, policy)
        placement = place_largest(gang, elastic, topo.gpus_free, lambda sized: engine_place(sized, topo, policy))
        if placement.placed:
            self._placed[gang.key] = placement
        return placement

    # ----- periodic --------------------------------------------------------------------------------
    def upkeep(self, now: float) -> None:
        """Adopt new elastic reservations, evict pods beyond their size, shrink or grow (under the lock)."""
        for key, entry in list(self.state.ledger.entries.items()):
            elastic = self.range_of(key)
            if elastic is None or key in self.lifecycle.rolling_back:
                continue
            if entry.elastic is None:
                self._adopt(entry, elastic)
            if entry.elastic is None:
                continue  # not a whole number of replicas (cannot happen for a validated membership)
            if self._evict_beyond(entry, now):
                continue  # dropped replicas still terminating: their GPUs are not free yet
            if self._grow_stalled(entry, elastic, now):
                continue
            if entry.has_bound() and entry.missing_indices():
                self._shrink_if_stuck(entry, elastic, now)
            elif entry.status == STATUS_BOUND:
                if self._whole_at.get(key) != entry.elastic["generation"]:
                    self._whole_at[key] = entry.elastic["generation"]
                    self.lifecycle.republish.add(key)
                self._grow(entry, elastic, now)
        for key, waiting in self.lifecycle.queue.entries.items():
            elastic = self.range_of(key)
            if elastic is not None and key not in self.state.ledger.entries:  # waits for its smallest size only
                waiting.pods = min(waiting.pods, elastic.pods_at(elastic.min_dp))
        for uid in [u for u in self.evicted if u not in self.state.pods]:
            del self.evicted[uid]
        for table in (self._whole_at, self._grow_tried, self._placed, self._grown_at, self._no_grow_until):
            for key in [k for k in table if k not in self.state.ledger.entries]:
                del table[key]

    def _adopt(self, entry: Reservation, elastic: ElasticRange) -> None:
        """Record the range on an entry; one not placed by `place` (rebuilt from bound pods after a restart, at
        the declared size) is cut to the smallest whole-replica size, >= min, holding every bound member."""
        if len(entry.gang.pods) % elastic.pods_per_replica:
            return
        fresh = entry.placement is not None and self._placed.pop(entry.gang_key, None) is entry.placement
        bound = [i for i, slot in entry.slots.items() if slot.state in (SLOT_BOUND, SLOT_BINDING)]
        dp = self.active_dp(entry, elastic)
        if not fresh and bound:
            need = -(-(max(bound) + 1) // elastic.pods_per_replica)
            dp = min(max(need, elastic.min_dp), dp)
        entry.elastic = {"min_dp": elastic.min_dp, "max_dp": elastic.max_dp, "dp": dp, "generation": 1}
        if dp != self.active_dp(entry, elastic):
            self._set_size(entry, elastic, dp)
        if entry.given_conflict:  # members bound at different sizes (before a restart) state different dps
            givens = [self.normalize_given(entry, r.given) for r in self.lifecycle.members(entry.gang_key)
                      if r.node and r.given is not None and r.member.index < len(entry.gang.pods)]
            if givens and all(g.agrees_with(givens[0]) for g in givens):
                entry.given, entry.given_conflict = givens[0], ""

    def _evict_beyond(self, entry: Reservation, now: float) -> bool:
        """Evict every still-bound pod at or past the gang's size; True while any is still there."""
        size, present = len(entry.gang.pods), False
        for record in self.lifecycle.members(entry.gang_key):
            if not record.node or record.member.index < size:
                continue
            present = True
            if now - self.evicted.get(record.uid, -REEVICT_SECONDS) >= REEVICT_SECONDS:
                self.evicted[record.uid] = now
                self.dispatcher.evict(self.lifecycle.pod_ref(record),
                                      f"elastic gang {entry.gang_key} shrank to {len(entry.gang.pods)} pods; "
                                      f"pod index {record.member.index} is outside it")
        return present

    def _shrink_if_stuck(self, entry: Reservation, elastic: ElasticRange, now: float) -> None:
        if any(slot.state == SLOT_BINDING for slot in entry.slots.values()):
            return  # a bind is in flight: decide once it has landed
        missing = entry.missing_indices()
        placement, reason = reserve_remaining(self.state.ledger, entry, self.state.topology, self.policy)
        if placement is not None:
            self.lifecycle.reserved(entry, None, "missing members re-held")
            return
        if "pod 0" in reason:
            return  # the rendezvous host is lost: the lifecycle rolls the gang back (docs/elastic.md)
        dp = self.active_dp(entry, elastic)
        target = shrink_target(dp, elastic, len(missing))
        if target < elastic.min_dp:
            self.lifecycle.rollback(entry, f"elastic gang {entry.gang_key} lost {len(missing)} member(s) with no "
                                           f"room to re-place them and cannot shrink below dp={elastic.min_dp}")
            return
        self._resize(entry, elastic, target, "shrink", now,
                     f"{len(missing)} member(s) lost and no room to re-place them ({reason})")

    def _grow(self, entry: Reservation, elastic: ElasticRange, now: float) -> None:
        key, topo = entry.gang_key, self.state.topology
        dp = self.active_dp(entry, elastic)
        if dp >= elastic.max_dp or now < self._no_grow_until.get(key, now):
            return
        members = self.lifecycle.members(key)
        priority = max((r.priority for r in members), default=0)
        if any(w.priority >= priority for k, w in self.lifecycle.queue.entries.items() if k != key):
            return  # a gang of higher or equal priority waits: the room is its
        pending = {r.member.index for r in members if not r.node}
        ready = dp
        while ready < elastic.max_dp and all(i in pending for i in range(elastic.pods_at(ready),
                                                                           elastic.pods_at(ready + 1))):
            ready += 1
        fingerprint = (self.state.generation, topo.gpus_free, ready)
        if ready == dp or self._grow_tried.get(key) == fingerprint:
            return
        g = entry.gang.gpus_per_pod
        for target in range(ready, dp, -1):
            if (elastic.pods_at(target) - len(entry.gang.pods)) * g > topo.gpus_free:
                continue
            old = (entry.gang, entry.given, entry.placement)
            self._set_size(entry, elastic, target)
            placement, _ = reserve_remaining(self.state.ledger, entry, topo, self.policy)
            if placement is not None:
                entry.placement = placement
                self._grow_tried.pop(key, None)
                self._grown_at[key] = (now, dp)
                self._resize(entry, elastic, target, "grow", now, "room freed", old_dp=dp)
                self.lifecycle.reserved(entry, None, f"grown to dp={target}")
                return
            entry.gang, entry.given, entry.placement = old
        self._grow_tried[key] = fingerprint

    def _grow_stalled(self, entry: Reservation, elastic: ElasticRange, now: float) -> bool:
        """Members added by a grow not all bound after half the completion timeout: give their room back (keep the
        largest fully bound prefix, >= the size before the grow) instead of letting the timeout roll the running
        gang back.  True when it shrank."""
        grown = self._grown_at.get(entry.gang_key)
        if grown is None or entry.status == STATUS_BOUND:
            self._grown_at.pop(entry.gang_key, None)
            return False
        at, before = grown
        if now - at < self.lifecycle.completion_timeout / 2 or any(
                slot.state == SLOT_BINDING for slot in entry.slots.values()):
            return False
        bound = {i for i, slot in entry.slots.items() if slot.state == SLOT_BOUND}
        if not all(i in bound for i in range(elastic.pods_at(before))):
            return False  # a member of the old size is missing too: the shrink rule decides
        dp = self.active_dp(entry, elastic)
        target = max(d for d in range(before, dp) if all(i in bound for i in range(elastic.pods_at(d))))
        del self._grown_at[entry.gang_key]
        self._no_grow_until[entry.gang_key] = now + self.lifecycle.completion_timeout  # no grow/give-back loop
        self._resize(entry, elastic, target, "shrink", now,
                     f"the members added by growing from dp={before} did not all bind within "
                     f"{self.lifecycle.completion_timeout / 2:.0f} s; their room is given back")
        return True

    # ----- resizing ---------------------------------------------------------------------------------
    def _set_size(self, entry: Reservation, elastic: ElasticRange, dp: int) -> None:
        """Make the entry's gang dp-sized: slots past it are dropped (reserved ones released), `given` follows."""
        members = self.lifecycle.members(entry.gang_key)
        names = {r.member.index: r.name for r in members}
        full = gang_from_membership(members[0].member, names) if members else entry.gang
        gang = replace(resized_gang(full, elastic, dp), priority=entry.gang.priority)
        for index in [i for i in entry.slots if i >= len(gang.pods)]:
            slot = entry.slots.pop(index)
            if slot.state in (SLOT_RESERVED, SLOT_BINDING):
                self.state.topology.remove_pod(reservation_key(entry.gang_key, index))
        entry.gang = gang
        if entry.given is not None:
            entry.given = replace(entry.given, parallelism=str(gang.parallelism))
        if entry.placement is not None:
            nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
            entry.placement = Placement(gang, PLACED, entry.placement.policy, entry.placement.rank_order,
                                        None, nodes)

    def _resize(self, entry: Reservation, elastic: ElasticRange, dp: int, direction: str, now: float, why: str,
                old_dp: int | None = None) -> None:
        """Resize (shrink: drop the replicas past `dp`), bump the generation, republish, tell and count."""
        key = entry.gang_key
        old_dp = self.active_dp(entry, elastic) if old_dp is None else old_dp
        if direction == "shrink":
            self._set_size(entry, elastic, dp)
            self._evict_beyond(entry, now)
        if entry.missing_indices() or entry.status != STATUS_BOUND:
            entry.bound_since = now  # the completion deadline of the members still to bind counts from here
        info = entry.elastic or {"min_dp": elastic.min_dp, "max_dp": elastic.max_dp, "generation": 0}
        entry.elastic = {**info, "dp": dp, "generation": info["generation"] + 1}
        self.lifecycle.republish.add(key)
        self.lifecycle.counters[f"elastic_{direction}"] += 1
        message = (f"elastic gang {key} resized from dp={old_dp} to dp={dp} ({elastic.describe(dp)}, "
                   f"{len(entry.gang.pods)} pods, rank table generation {entry.elastic['generation']}): {why}")
        log.info(message, extra={"gang": key, "decision": f"elastic-{direction}"})
        members = self.lifecycle.members(key)
        if members:
            first = min(members, key=lambda r: r.member.index)
            self.dispatcher.event(self.lifecycle.pod_ref(first), "GangResized", message,
                                  EVENT_WARNING if direction == "shrink" else EVENT_NORMAL)
        if self.observe is not None:
            self.observe(direction)
