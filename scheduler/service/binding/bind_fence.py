"""`NominationFence`: when a nominated member may be bound without racing a pod kube-scheduler is placing.

meshfit reserves a gang, then nominates each member on its reserved node (`status.nominatedNodeName`).  From the
moment kube-scheduler's informer has that nomination, its filters count the member's requests on the node for
every pod of no higher priority (`RunFilterPluginsWithNominatedPods`), exactly as for its own preemptors.  What
the nomination cannot stop is a pod whose scheduling cycle ran *before* kube-scheduler saw it: such a pod may be
assumed on the node with its Binding still on the way.  The fence closes that window:

- The watch delivers pod changes in the API server's order, so a pod first seen after the member's nomination
  was seen was created after it, and kube-scheduler's informer (same order) had the nomination before it.
- A lone GPU pod of meshfit's profile is placed by kube-scheduler too, but only on a node meshfit's `/filter` offered
  it, and every answer given after the member was held on X leaves X out where the two collide
  (`GangNominations.answer_lone`).  So such a pod races the member only while the answer it last got from meshfit
  named X, was given before the member was held there, and the pod has not changed since (that cycle may still
  be in flight).  One kube-scheduler has not asked meshfit about yet does not hold the member: its answer will
  count the member.  (A burst's lone pods that wait for GPUs otherwise held every member for the whole fence limit.)
- So the other pods that can still race the member on node X are the pods kube-scheduler places in its own cycle (no
  gang: CPU pods, and lone GPU pods meshfit only answers for: `ClusterState.pending_outside`), unbound, that *collide* with the member on X (each fits there
  alone, not both, as kube-scheduler sees X for that pod: bound pods, the pods it assumed there itself, and the
  nominations it honours for that pod's priority -- never meshfit's own holds or Bindings in flight), and either were first seen before the nomination and have not changed since (a cycle of
  theirs may be in flight), or have a higher priority (kube-scheduler ignores a lower-priority nomination).
- Where kube-scheduler also calls `/guard` for the pods it places in its own cycle (an ignorable extender interested
  in every pod: `scheduler.service.verbs.room_guard`), such a pod is judged by meshfit's last answer, as a lone GPU pod
  is: while the pod has not changed since that answer, it races the member only if the answer named X and was given
  before the member was held there -- whatever its priority (a pod changed since, its cycle over, is judged as
  below until kube-scheduler asks again).  A pod of higher priority created after the fence passed is asked
  about before kube-scheduler can place it, and the answer counts the member.
- While any such pod exists, the member waits; a pod bound (anywhere), deleted, or rewritten by kube-scheduler
  since (its cycle ended without a Binding) no longer holds it.  After `limit_seconds` the member is bound anyway:
  a cycle that started before the nomination has long ended by then.  Not so for a pod of higher priority, which
  ignores the nomination in every cycle: while it is pending and could take the room, the member waits for it to
  be placed, up to `HIGHER_PRIORITY_PATIENCE_SECONDS` from when it was first found racing.  The fit check right before the Binding
  (`GangBinding`) then counts whatever landed meanwhile.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Container

DEFAULT_FENCE_SECONDS = 2.0
"""How long a nominated member waits at most for pods that may race it (see the module docstring)."""
HIGHER_PRIORITY_PATIENCE_SECONDS = 30.0
"""How long a member waits for a pending pod of higher priority that could take its room.  kube-scheduler ignores a
lower-priority nomination for such a pod, so no time limit makes the race safe: while the pod is pending and fits
there, kube-scheduler may place it there in any cycle.  One that fits is normally placed within seconds; one still
pending after this long is held back by something meshfit does not model (inter-pod affinity, volumes), and no
longer holds the member."""


@dataclass(frozen=True)
class SeenNomination:
    """When the watch first showed a member nominated on a node: that node, the state's event count, the time."""

    node: str
    event: int
    at: float


@dataclass(frozen=True)
class FilterAnswer:
    """meshfit's last `/filter` answer for a lone GPU pod: its order among answers and holds, the state's pod-event
    count then, and the nodes it offered."""

    stamp: int
    event: int
    nodes: frozenset[str]


class NominationFence:
    """Decides whether a nominated member may be bound now (call under the state lock)."""

    def __init__(self, state: Any, fit: Any, clock: Callable[[], float], limit_seconds: float = DEFAULT_FENCE_SECONDS,
                 scheduler_names: Callable[[], Container[str]] = lambda: ()) -> None:
        self.state, self.fit, self.clock, self.limit_seconds = state, fit, clock, limit_seconds
        self.scheduler_names = scheduler_names
        self._order = itertools.count(1)
        self.answers: dict[str, FilterAnswer] = {}
        """Lone GPU pod uid -> meshfit's last `/filter` answer for it."""
        self.held: dict[str, tuple[str, int]] = {}
        """Member uid -> (node, stamp) of when the direct binder began holding it there."""
        self.seen: dict[str, SeenNomination] = {}
        """Pod uid -> when its current nomination was first seen."""
        self.counts = {"waited": 0, "passed": 0, "timed_out": 0}
        self.passed: dict[str, tuple[str, int]] = {}
        """Member uid -> (node, event of its nomination) when it last passed: the pods that race it then form a set
        that only shrinks (a pod seen later, or changed since, no longer races it; a lone pod answered since left
        its node out), except pods of higher priority, so a member that passed is not walked over every pending pod
        again (at 5,000 nodes: 170,071 passes over hundreds of pending pods for 5,718 members)."""
        self.noticed: dict[str, float] = {}
        """Pod uid -> when a pending pod of higher priority than a member was first found racing it."""

    def note(self, record: Any) -> SeenNomination | None:
        """Remember when `record`'s nomination was first seen (None when it has none)."""
        if not record.nominated:
            self.seen.pop(record.uid, None)
            return None
        seen = self.seen.get(record.uid)
        if seen is None or seen.node != record.nominated:
            seen = self.seen[record.uid] = SeenNomination(record.nominated, self.state.pod_events, self.clock())
        return seen

    def wait_seconds(self, record: Any, node: str) -> float:
        """0 when `record`, nominated on `node`, may be bound now; else how long to wait before asking again."""
        seen = self.note(record)
        if seen is None or seen.node != node:
            return self.limit_seconds  # not nominated there (yet): the caller nominates first
        if self.passed.get(record.uid) == (node, seen.event):
            highest = self.state.highest_outside_priority()
            if highest is None or highest <= record.priority:
                self.counts["passed"] += 1
                return 0.0  # passed before, and only a pod of higher priority can begin to race it later
        racing = self.racing(record, node, seen)
        if not racing:
            self.counts["passed"] += 1
            self.passed[record.uid] = (node, seen.event)
            return 0.0
        now = self.clock()
        left = seen.at + self.limit_seconds - now
        urgent = [self.noticed.setdefault(other.uid, now) for other in racing if other.priority > record.priority]
        left = max([left] + [at + HIGHER_PRIORITY_PATIENCE_SECONDS - now for at in urgent])
        if left <= 0:
            self.counts["timed_out"] += 1
            return 0.0
        self.counts["waited"] += 1
        return min(left, 0.1)

    def racing_now(self, record: Any, node: str) -> list[Any]:
        """The pods that may land on `node` against `record` if its Binding were posted now, without a nomination:
        `racing` as of this moment -- every pending pod seen so far that collides, unless its last `/guard` or
        `/filter` answer already counted the member (it is held before this is asked)."""
        return self.racing(record, node, SeenNomination(node, self.state.pod_events, self.clock()))

    def note_answer(self, record: Any, nodes: list[str]) -> None:
        """meshfit answered kube-scheduler's `/filter` for lone GPU pod `record` with `nodes` (under the lock)."""
        self.answers[record.uid] = FilterAnswer(next(self._order), self.state.pod_events, frozenset(nodes))
        if len(self.answers) > 2 * len(self.state.pending_outside) + 1024:  # pods bound or gone since
            self.answers = {uid: a for uid, a in self.answers.items() if uid in self.state.pending_outside}

    def note_hold(self, uid: str, node: str | None) -> None:
        """The direct binder began holding member `uid` on `node` (None: let go)."""
        if node is None:
            self.held.pop(uid, None)
        elif self.held.get(uid, ("", 0))[0] != node:
            self.held[uid] = (node, next(self._order))

    def racing(self, record: Any, node: str, seen: SeenNomination) -> list[Any]:
        """The pods that may still land on `node` against `record` (see the module docstring): each asks the room
        ledger in kube-scheduler's view for its priority, beside the member and what meshfit puts there with it
        (`RoomCheck.collides`)."""
        found, names, memo = [], self.scheduler_names(), {}
        held = self.held.get(record.uid)
        held_stamp = held[1] if held is not None and held[0] == node else None
        for other, first, last in self.state.pending_outside.values():
            answer = self.answers.get(other.uid)
            if other.gpus and other.scheduler_name in names:  # placed only where meshfit's /filter offered
                may = (answer is not None and node in answer.nodes and last <= answer.event
                       and (held_stamp is None or answer.stamp < held_stamp))
            elif answer is not None and last <= answer.event:  # asked /guard, unchanged since: that cycle decides
                may = node in answer.nodes and (held_stamp is None or answer.stamp < held_stamp)
            else:  # /guard not asked (not configured, not yet, or the cycle since ended): as before
                may = (first < seen.event and last < seen.event) or other.priority > record.priority
            if may and self.fit.collides(other, record, node, memo):
                found.append(other)
        return found

    def forget(self, uid: str) -> None:
        """Drop what is remembered of a pod."""
        self.seen.pop(uid, None)
        self.passed.pop(uid, None)
        self.noticed.pop(uid, None)
        self.held.pop(uid, None)
        self.answers.pop(uid, None)
