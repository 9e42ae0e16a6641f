"""meshfit's queue of waiting gangs: who gets room first when it frees.

A gang waits here from the first time one of its members is refused for lack of room until it is
reserved (or its members are gone).  Order: priority (the pods' `spec.priority`, which the
PriorityClass admission fills in) descending, then arrival.  The first waiting gang that could fit
on the cluster at all is the *head*; a later gang may be reserved before it only when EASY backfill
(`scheduler.gangs.backfill`, the simulator's very rule) says that doing so costs the head none of the pod
slots it is waiting for.  The service does not know when running jobs end, so the head's shadow
time is "never" and a backfilled gang counts as running past it: backfill takes only GPUs the head
could not use anyway (partly used nodes for a whole-node head, another domain when it fits by count
but not by topology).  That is what keeps a 64-pod gang from being starved by a stream of small ones.

That is `BACKFILL_EASY`, the default.  `BACKFILL_BEST_EFFORT` has no head: a later gang is reserved whenever it fits,
as kube-scheduler's own queue and Kueue's `BestEffortFIFO` do.  It binds more gangs where the room a waiting big gang
needs may never free (nothing ends in a static benchmark), at the price of that starvation protection.

The queue is plain data; `GangScheduler` drives it under `ClusterState.lock`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from scheduler.gangs.backfill import reserve as easy_reservation
from topology.model import ClusterTopology


@dataclass
class WaitingGang:
    """One waiting gang: identity, shape, order keys, the last reason and the nodes last offered."""

    key: str
    priority: int
    seq: int
    arrived_at: float
    pods: int
    gpus_per_pod: int
    reason: str = ""
    offered: frozenset[str] | None = None
    """Node names kube-scheduler last offered a member (its own filters passed); None = not known."""
    tries: int = 0

    def order(self) -> tuple[int, int]:
        """Sort key: higher priority first, then earlier arrival."""
        return (-self.priority, self.seq)

    def to_json(self, position: int) -> dict:
        """`GET /gangs` row of a waiting gang."""
        return {"gang": self.key, "state": "waiting", "position": position, "priority": self.priority,
                "pods": self.pods, "gpus_per_pod": self.gpus_per_pod, "arrived_at": self.arrived_at,
                "waiting_since": since_text(self.arrived_at), "reason": self.reason}


def since_text(at: float) -> str:
    """A clock time as people read it in logs: `2026-11-23T08:07:25Z` (UTC)."""
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{at:.0f}"


BACKFILL_EASY = "easy"
"""A later gang may start only if it costs the head none of the slots it waits for (the default)."""
BACKFILL_BEST_EFFORT = "best-effort"
"""A later gang starts whenever it fits (no head)."""
BACKFILL_MODES = (BACKFILL_EASY, BACKFILL_BEST_EFFORT)
"""The backfill rules `GangQueue` knows."""


def backfill_rule(chosen: str | None, group_cycle: bool) -> str:
    """The rule `meshfit serve` runs: the one chosen, else best-effort under kube-scheduler's group cycle (its queue,
    or Kueue ahead of it, orders the groups; meshfit only places) and EASY backfill as extender."""
    return chosen or (BACKFILL_BEST_EFFORT if group_cycle else BACKFILL_EASY)


@dataclass
class GangQueue:
    """Waiting gangs by key; see the module docstring for the order and the backfill rule."""

    entries: dict[str, WaitingGang] = field(default_factory=dict)
    arrivals: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Gang key -> (sequence, time) of first arrival, kept while the gang exists so a gang whose
    reservation expired goes back to its old place, not the end of the queue."""
    _seq: itertools.count = field(default_factory=itertools.count)
    backfill: str = BACKFILL_EASY
    """`BACKFILL_EASY` or `BACKFILL_BEST_EFFORT` (module docstring)."""

    def __post_init__(self) -> None:
        if self.backfill not in BACKFILL_MODES:
            raise ValueError(f"backfill must be one of {', '.join(BACKFILL_MODES)}, got {self.backfill!r}")

    def note(self, key: str, priority: int, pods: int, gpus_per_pod: int, reason: str, now: float,
             offered: frozenset[str] | None = None) -> WaitingGang:
        """Add the gang (or update it) as waiting, with why."""
        seq, arrived = self.arrivals.setdefault(key, (next(self._seq), now))
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = WaitingGang(key, priority, seq, arrived, pods, gpus_per_pod)
        entry.priority, entry.pods, entry.gpus_per_pod, entry.reason = priority, pods, gpus_per_pod, reason
        if offered is not None:
            entry.offered = offered
        entry.tries += 1
        return entry

    def arrival(self, key: str, now: float) -> tuple[int, float]:
        """The gang's (sequence, time) of first arrival, recorded now if it is new."""
        return self.arrivals.setdefault(key, (next(self._seq), now))

    def admitted(self, key: str) -> None:
        """The gang was reserved: it no longer waits (its arrival is kept)."""
        self.entries.pop(key, None)

    def forget(self, key: str) -> None:
        """The gang is gone (every member deleted): drop it entirely."""
        self.entries.pop(key, None)
        self.arrivals.pop(key, None)

    def ordered(self) -> list[WaitingGang]:
        """Waiting gangs in queue order."""
        return sorted(self.entries.values(), key=WaitingGang.order)

    def position(self, key: str) -> int | None:
        """1-based position in the queue, or None when the gang is not waiting."""
        for position, entry in enumerate(self.ordered(), 1):
            if entry.key == key:
                return position
        return None

    def head_before(self, key: str, priority: int, topo: ClusterTopology) -> WaitingGang | None:
        """The head a gang `key` of `priority` must not delay: the first waiting gang ordered before it
        that could fit on this cluster at all; None when there is none (always, under best-effort backfill)."""
        if self.backfill == BACKFILL_BEST_EFFORT:
            return None
        seq = self.arrivals.get(key, (math.inf, 0.0))[0]
        for entry in self.ordered():
            if entry.key == key or entry.order() >= (-priority, seq):
                return None
            if could_ever_fit(topo, entry.pods, entry.gpus_per_pod):
                return entry
        return None


def could_ever_fit(topo: ClusterTopology, pods: int, gpus_per_pod: int) -> bool:
    """True if `pods` pods of `gpus_per_pod` GPUs fit on the schedulable nodes when nothing else runs."""
    if gpus_per_pod <= 0:
        return True
    slots = 0
    for node in topo.nodes:
        if node.schedulable:
            slots += node.gpus_total // gpus_per_pod
            if slots >= pods:
                return True
    return False


def delays_head(topo: ClusterTopology, head: WaitingGang, usage: dict[int, int]) -> bool:
    """True if holding GPUs `usage` (node index -> GPUs) from now on costs `head` pod slots it waits for.

    EASY with unknown end times: the head's shadow time is never (or now, when it fits by count but
    not by shape), the candidate runs past it, so it may take only the head's spare slots.
    """
    free_now = [node.gpus_free for node in topo.nodes]
    up = [node.schedulable for node in topo.nodes]
    shadow = easy_reservation(head.gpus_per_pod, head.pods, 0.0, free_now, up, ())
    return shadow.slot_loss(usage) > shadow.spare  # `allows(usage, end)` with end after any shadow time
