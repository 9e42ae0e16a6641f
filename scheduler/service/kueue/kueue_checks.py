"""meshfit's Kueue admission check controller (`spec.controllerName: meshfit.io/topology`).

Kueue admits a Workload once it reserved quota and every admission check of its ClusterQueue is Ready.  For
each AdmissionCheck it serves, meshfit sets the `Active` condition (a check nobody activates makes its
ClusterQueues inactive); for each Workload naming such a check, once Kueue reserved quota, it answers with
the gang the Job's pods will form (the key, size and constraints the gang sources give them, read from the
podset template -- so an Indexed Job's reservation is keyed `namespace/<job>` as its pods are):

- **Ready**: the gang fits its best layout now, and may start without delaying meshfit's queue head: it is
  reserved in the ledger -- the same reservation the extender honours when the pods arrive.
- **Pending**: it does not fit now; the message is the reason `meshfit gangs` shows for a waiting gang.
  Re-evaluated when capacity changes (at least every `RECHECK_SECONDS`).
- **Retry**: a reservation this controller made lapsed (TTL, a node lost) before any pod bound: Kueue
  releases the quota and queues the Workload again.
- **Rejected**: it can never fit (more GPUs than the whole cluster, a required domain smaller than the gang)
  or its pod template is invalid for meshfit; Kueue deactivates the Workload.

A Workload that finishes, is deleted or loses its quota releases a reservation made for it that no pod holds
yet.  Runs on the leader only (the `active` callable); writes go through `scheduler.kube.kueue_status`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from scheduler.gangs.membership import gang_from_membership, membership_signature
from scheduler.gangs.queue import delays_head
from scheduler.gangs.reserve_ops import shortfall_reason
from scheduler.placement.capacity import resolve_level
from scheduler.placement.jobs import JobSpecError
from scheduler.service.kueue import kueue_workloads as wl
from scheduler.service.lifecycle.gang_admission import usage_of
from topology.model import TopologyError

log = logging.getLogger("meshfit.kueue")

PASS_SECONDS = 0.2
"""How often the controller looks for changes (Kueue objects, capacity, the ledger); a pass runs on a change."""
IDLE_PASS_SECONDS = 2.0
"""A pass runs at least this often even when nothing changed (re-placing Pending Workloads, retrying writes)."""
RECHECK_SECONDS = 10.0
"""A Pending Workload is placed again at least this often (and whenever capacity changes)."""
WRITE_SETTLE_SECONDS = 3.0
"""After a write, the same answer is not written again until the watch shows it (or this long passed)."""
READY, PENDING, RETRY, REJECTED = "Ready", "Pending", "Retry", "Rejected"


class CheckWriter(Protocol):
    """What the controller writes (`scheduler.kube.kueue_status.KueueStatusWriter` in real mode)."""

    def set_active(self, name: str, version: str, generation: int, message: str, since: str | None = None) -> None:
        """Mark an AdmissionCheck Active."""

    def set_check_state(self, namespace: str, name: str, version: str, check: str, state: str, message: str,
                        since: str | None = None) -> None:
        """Set one check's state on a Workload."""


@dataclass
class Answer:
    """A check state to write for one Workload (None state: nothing to say yet)."""

    state: str | None
    message: str = ""
    key: str | None = None
    """The gang a Ready answer reserved (its entry standing keeps the answer without re-reading the Workload)."""


@dataclass
class _Seen:
    """What the controller last decided for one Workload."""

    answer: Answer
    evaluated_at: float
    capacity: tuple
    written: dict[str, tuple[str, str, float]] = field(default_factory=dict)


def never_fits(gang: Any, topo: Any) -> str:
    """Why the gang could not fit even on an empty cluster ("" when it could)."""
    g = gang.gpus_per_pod
    if g <= 0:
        return ""
    slots = sum(node.gpus_total // g for node in topo.nodes)
    if slots < len(gang.pods):
        return (f"gang {gang.key} needs {len(gang.pods)} pods x {g} GPUs; the whole cluster holds at most {slots} "
                f"such pods")
    level_name = gang.constraint.required_level
    if level_name:
        try:
            level = resolve_level(topo, level_name)
        except TopologyError:
            return ""  # a level typo: waits with the reason (a Topology may still appear)
        best = max((sum(topo.nodes[n].gpus_total // g for n in d.nodes) for d in topo.domains if d.level == level),
                   default=0)
        if best < len(gang.pods):
            return (f"gang {gang.key} must fit in one {level_name} domain; the largest holds {best} pods of {g} GPUs, "
                    f"it has {len(gang.pods)}")
    return ""


def ready_message(entry: Any) -> str:
    """The Ready message: what is reserved where (stable while the reservation stands)."""
    nodes = sorted({entry.node_of(i) for i in range(len(entry.gang.pods))} - {None})
    shown = ", ".join(nodes[:4]) + (f" (+{len(nodes) - 4})" if len(nodes) > 4 else "")
    return (f"gang {entry.gang_key}: {len(entry.gang.pods)} pods x {entry.gang.gpus_per_pod} GPUs reserved by meshfit "
            f"on {len(nodes)} node(s) ({shown}); its pods bind there when they arrive")


class KueueCheckController:
    """Answers meshfit's Kueue admission checks (see the module docstring); `run` loops until `stop`."""

    def __init__(self, scheduler: Any, writer: CheckWriter, active: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scheduler, self.state, self.writer = scheduler, scheduler.state, writer
        self.active, self.clock = active, clock
        self.made: dict[str, str] = {}
        """Gang key -> uid of the Workload this controller reserved it for (in this process)."""
        self.seen: dict[str, _Seen] = {}
        """Workload uid -> the last decision."""
        self.activated: dict[str, int] = {}
        self.stop = threading.Event()
        self._announced = False

    # ----- the loop ------------------------------------------------------------------------------
    def start(self) -> threading.Thread:
        """Run `run` in a daemon thread."""
        thread = threading.Thread(target=self.run, name="meshfit-kueue-checks", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        """While `active()` (the leader, cache synced) and until `stop`: a pass on every change, else every
        `IDLE_PASS_SECONDS`."""
        last, last_at = None, 0.0
        while not self.stop.wait(PASS_SECONDS):
            if not self.active() or self.state.generation == 0:
                continue
            changes, now = self._changes(), self.clock()
            if changes == last and now - last_at < IDLE_PASS_SECONDS:
                continue
            last, last_at = changes, now
            try:
                self.pass_once()
            except Exception:  # noqa: BLE001 - one failed pass must not end the controller
                log.exception("Kueue admission check pass failed; retrying")

    def _changes(self) -> tuple:
        """What a pass depends on, cheaply (read without the lock): the objects' epoch and the capacity."""
        return (getattr(self.state, "objects_epoch", None), *self._capacity())

    def pass_once(self) -> int:
        """Decide every Workload naming one of meshfit's checks, then write what changed; returns the writes."""
        writes: list[Callable[[], None]] = []
        with self.state.lock:
            checks, workloads = self._snapshot()
            writes += [self._activation(c) for c in checks.values() if self._needs_activation(c)]
            names = frozenset(checks)
            live = set()
            for workload in sorted(workloads, key=lambda w: (-wl.priority_of(w), str(wl.meta(w).get(
                    "creationTimestamp") or ""))):
                live.add(str(wl.meta(workload).get("uid")))
                writes += self._writes_for(workload, names)
            self._forget(live)
        done = 0
        for write in writes:
            try:
                write()
                done += 1
            except Exception as exc:  # noqa: BLE001 - the API server answers later; the next pass retries
                log.warning("Kueue admission check write failed: %s", exc)
        return done

    def _snapshot(self) -> tuple[dict[str, dict], list[dict]]:
        checks, workloads = {}, []
        for (group, kind, _, name), obj in self.state.objects.items():
            if group != wl.KUEUE_GROUP:
                continue
            if kind == "AdmissionCheck" and wl.is_meshfit_check(obj):
                checks[name] = obj
            elif kind == "Workload":
                workloads.append(obj)
        if checks and not self._announced:
            self._announced = True
            log.info("serving Kueue admission checks %s (controller %s)", ", ".join(sorted(checks)),
                     wl.CONTROLLER_NAME)
        return checks, workloads

    # ----- AdmissionChecks: Active -----------------------------------------------------------------
    def _needs_activation(self, check: Mapping[str, Any]) -> bool:
        generation = int(wl.meta(check).get("generation") or 0)
        cond = wl.find_condition(check, "Active")
        if cond is not None and cond.get("status") == "True" and cond.get("observedGeneration") == generation:
            return False
        return self.activated.get(str(wl.meta(check).get("name"))) != generation

    def _activation(self, check: Mapping[str, Any]) -> Callable[[], None]:
        name, generation = str(wl.meta(check).get("name")), int(wl.meta(check).get("generation") or 0)
        version = wl.api_version_of(check)

        def write() -> None:
            self.writer.set_active(name, version, generation, f"meshfit serves this check ({wl.CONTROLLER_NAME}): "
                                   "Ready once the job's gang fits its best layout and is reserved")
            self.activated[name] = generation
            log.info("AdmissionCheck %s is Active (controller %s)", name, wl.CONTROLLER_NAME)

        return write

    # ----- Workloads ---------------------------------------------------------------------------
    def _writes_for(self, workload: Mapping[str, Any], names: frozenset[str]) -> list[Callable[[], None]]:
        uid = str(wl.meta(workload).get("uid"))
        states = wl.check_states(workload, names)
        if not states or wl.finished(workload) or not wl.quota_reserved(workload):
            self._release_for(uid, "its Workload finished" if wl.finished(workload) else "Kueue released its quota")
            self.seen.pop(uid, None)
            return []
        answer = self._answer(workload, uid)
        if answer.state is None:
            return []
        return [w for check, entry in states.items() if (w := self._write(workload, uid, check, entry, answer))]

    def _capacity(self) -> tuple:
        return (self.state.generation, self.state.topology.gpus_free, len(self.state.ledger.entries))

    def _answer(self, workload: Mapping[str, Any], uid: str) -> Answer:
        seen, now, capacity = self.seen.get(uid), self.clock(), self._capacity()
        if seen is not None and seen.answer.state == PENDING and seen.capacity == capacity \
                and now - seen.evaluated_at < RECHECK_SECONDS:
            return seen.answer
        if seen is not None and seen.answer.state == READY and (seen.answer.key is None or self._holds(seen.answer.key)):
            return seen.answer  # still reserved (or bound): nothing to re-read
        answer = self._decide(workload, uid)
        if answer.state is not None:
            previous = seen.written if seen is not None else {}
            self.seen[uid] = _Seen(answer, now, self._capacity(), previous)
        return answer

    def _holds(self, key: str) -> bool:
        return key in self.state.ledger.entries or any(r.node for r in self.state.gang_index.get(key, {}).values())

    def _decide(self, workload: Mapping[str, Any], uid: str) -> Answer:
        """The answer for one quota-reserved Workload (see the module docstring); reserves when it fits."""
        try:
            member, why = wl.membership_for(self.state, workload)
        except JobSpecError as exc:
            return Answer(REJECTED, f"meshfit cannot place this job's pods: {exc}")
        if member is None:
            return Answer(None) if why == wl.NOT_YET else Answer(READY, f"nothing for meshfit to reserve: {why}")
        key = member.gang_key
        entry = self.state.ledger.get(key)
        if entry is not None:
            if self.made.get(key, uid) != uid:
                return Answer(PENDING, f"gang {key} is still held for an earlier Workload of that name")
            return Answer(READY, ready_message(entry), key)
        if any(r.node for r in self.state.gang_index.get(key, {}).values()):
            return Answer(READY, f"gang {key}: its pods are bound", key)
        if self.made.get(key) == uid:
            del self.made[key]
            return Answer(RETRY, f"meshfit's reservation of gang {key} lapsed before its pods were bound (they did "
                                 f"not arrive within the reservation TTL, or a reserved node was lost); Kueue "
                                 f"releases the quota and queues the Workload again")
        gang = gang_from_membership(member)
        reason = never_fits(gang, self.state.topology)
        if reason:
            return Answer(REJECTED, reason)
        where = f"Kueue admission check of Workload {wl.meta(workload).get('namespace')}/{wl.meta(workload).get('name')}"
        entry, reason = self.reserve(gang, member, wl.priority_of(workload), uid, where)
        return Answer(READY, ready_message(entry), key) if entry is not None else Answer(PENDING, reason)

    def _write(self, workload: Mapping[str, Any], uid: str, check: str, entry: Mapping[str, Any],
               answer: Answer) -> Callable[[], None] | None:
        shown = (str(entry.get("state") or ""), str(entry.get("message") or ""))
        wanted = (str(answer.state), answer.message)
        seen = self.seen.get(uid)
        last = seen.written.get(check) if seen is not None else None
        now = self.clock()
        if shown == wanted:
            return None
        if last is not None and last[:2] == wanted and now - last[2] < WRITE_SETTLE_SECONDS:
            return None  # written just now; the watch has not shown it yet
        if shown[0] == wanted[0] and last is not None and now - last[2] < RECHECK_SECONDS:
            return None  # only the message moved (free GPU counts): not a write per pass
        namespace, name = str(wl.meta(workload).get("namespace")), str(wl.meta(workload).get("name"))
        since = str(entry.get("lastTransitionTime") or "") if shown[0] == wanted[0] else None
        version = wl.api_version_of(workload)

        def write() -> None:
            self.writer.set_check_state(namespace, name, version, check, wanted[0], wanted[1], since or None)
            if seen is not None:
                seen.written[check] = (*wanted, self.clock())
            log.info("Workload %s/%s: check %s %s: %s", namespace, name, check, wanted[0], wanted[1],
                     extra={"workload": f"{namespace}/{name}", "check": check, "state": wanted[0]})

        return write

    # ----- reservations made for Workloads ------------------------------------------------------------
    def _release_for(self, uid: str, why: str) -> None:
        for key in [k for k, owner in self.made.items() if owner == uid]:
            del self.made[key]
            entry = self.state.ledger.get(key)
            if entry is not None and not entry.has_bound() and not self.state.gang_index.get(key):
                self.state.ledger.unreserve(key)
                log.info("gang %s: reservation released, %s before any pod arrived", key, why,
                         extra={"gang": key, "decision": "released"})
                self.scheduler.lifecycle.observe(key)

    def _forget(self, live: set[str]) -> None:
        for uid in [u for u in self.seen if u not in live]:
            del self.seen[uid]
        for uid in {u for u in self.made.values() if u not in live}:
            self._release_for(uid, "its Workload is gone")

    def reserve(self, gang: Any, member: Any, priority: int, uid: str, why: str) -> tuple[Any, str]:
        """Reserve the gang now if it fits without delaying meshfit's queue head: (entry, "") or (None, reason)."""
        lifecycle, topo, key = self.scheduler.lifecycle, self.state.topology, gang.key
        placement = lifecycle.admission.place_gang(gang, topo, self.scheduler.policy)
        head = lifecycle.queue.head_before(key, priority, topo)
        if placement.placed and (head is None or not delays_head(topo, head, usage_of(placement, topo))):
            entry = self.state.ledger.reserve(placement)
            entry.signature = membership_signature(member)
            self.made[key] = uid
            self.scheduler.rank_tables.forget(key)
            lifecycle.reserved(entry, None, why)
            if self.scheduler.on_placed is not None:
                self.scheduler.on_placed(placement)
            return entry, ""
        if not placement.placed:
            return None, shortfall_reason(placement.gang, topo, placement)
        return None, (f"gang {key} fits, but waits behind gang {head.key} ({head.pods} pods x {head.gpus_per_pod} "
                      f"GPUs, higher in the queue): starting now would take GPUs that gang is waiting for")


__all__ = ["Answer", "CheckWriter", "KueueCheckController", "PENDING", "READY", "REJECTED", "RETRY", "never_fits",
           "ready_message"]
