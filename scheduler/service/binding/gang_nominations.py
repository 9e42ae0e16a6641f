"""Nominations and kube-scheduler's assumed members, for `GangBinding` (a mixin).

meshfit writes each reserved member's `status.nominatedNodeName` before binding it (kube-scheduler's filters then count
the member's requests on its node), clears nominations it wrote for members whose reservation went elsewhere, and
counts members kube-scheduler has assumed (told their node at `/filter`, their `/bind` to come) on their node, as it
counts its own Bindings in flight.  See `scheduler.service.binding.gang_binding`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import SLOT_BINDING, SLOT_RESERVED
from scheduler.service.binding.binder import BindConflict

log = logging.getLogger("meshfit.bind")

KUBE_TOLD_SECONDS = 30.0
"""A member kube-scheduler was told its node for, whose `/bind` has not claimed its slot this long after, is taken
back: meshfit binds it with its peers (its `/bind`, should it come, finds it bound or binding)."""
WATCH_LAG_SECONDS = 1.0
"""How long a nomination written is awaited in the watch before it is written again (someone cleared it), at least:
while the watch has not reached the write's `resourceVersion` it is awaited however long that takes (a watch that lags
under a burst would otherwise have the same nomination written again and again)."""


RECENT_BIND_SECONDS = 10.0
"""How long after meshfit posted a Binding on a node `/guard` still checks pods against that node with the member counted:
kube-scheduler's cache learns of the Binding only from its own informer, which may lag meshfit's under load."""
GUARD_REASON_PREFIX = "insufficient "
"""The refusals `/guard` gives: room short on some resource (kube-scheduler's own filters passed the node, so any
other reason is a disagreement between the two views of the node, which is kube-scheduler's to judge)."""


def watch_behind(record: PodRecord, written: str | None) -> bool:
    """True while the watch has not yet shown the pod as of the write that gave it `resourceVersion` `written`: its
    record is older, so a nomination missing from it was not cleared by anyone, only not seen yet.  Resource
    versions are compared as the integers the API server gives (etcd revisions); anything else says False (the caller
    then goes by time alone)."""
    seen = record.fingerprint[2] if len(record.fingerprint) == 3 else None
    if written is None or not isinstance(seen, str):  # no resourceVersion in the pod (a request body's digest)
        return False
    try:
        return int(seen) < int(written)
    except (TypeError, ValueError):
        return False


class GangNominations:
    """Nomination writes and kube-scheduler's assumed members; mixed into `GangBinding` (it provides `state`, `clock`,
    `nominator`, `fence`, `fits`, `in_flight_requests`, `kube_handling`, `kube_told`, `told_on`, `in_flight`, `holds`,
    `nominating`, `nominated`, `counts`, `kick`, `member_pending`, `_submit`,
    `_nominations`, `_wake_later`, `_back_off`, `_busy`, `_others_on` and `_add_in_flight`)."""

    state: Any
    clock: Callable[[], float]
    nominator: Any
    kube_handling: dict
    kube_told: dict
    told_on: dict
    in_flight: dict
    holds: dict
    nominating: dict
    nominated: dict
    counts: dict
    fence: Any
    fits: Callable[..., str]
    in_flight_requests: dict
    _nominations: Any

    def note_kube_handling(self, record: PodRecord) -> None:
        """kube-scheduler is asking about this member now: it may bind it through `/bind` itself."""
        self.kube_handling[record.uid] = self.clock()

    def kube_assumes(self, record: PodRecord, node: str) -> None:
        """kube-scheduler was told `node` for this member: it assumes the member there and binds it through `/bind`.
        Until that ends (`kube_let_go`), the member is held on `node` (`hold`)."""
        self.hold(record, node)
        self._untell(record.uid)
        self.kube_told[record.uid] = node
        self.told_on.setdefault(node, set()).add(record.uid)
        if record.member is not None:  # its peers no longer wait for it (a gang reserved at this /filter binds now)
            self.kick(record.member.gang_key)

    def kube_let_go(self, record: PodRecord) -> None:
        """kube-scheduler is done with this member (bound, refused, or its `/bind` returned)."""
        self.kube_handling.pop(record.uid, None)
        self._untell(record.uid)
        self.let_go(record.uid)

    def _untell(self, uid: str) -> None:
        """Forget that kube-scheduler was told a node for `uid` (and the index of it)."""
        node = self.kube_told.pop(uid, None)
        if node is not None:
            told = self.told_on.get(node)
            if told is not None:
                told.discard(uid)
                if not told:
                    del self.told_on[node]

    def hold(self, record: PodRecord, node: str) -> None:
        """Count `record`'s requests on `node` from now on, as a Binding in flight is counted, until it is bound or
        let go: a member this binder nominated there (before the watch shows it) or kube-scheduler assumed there.
        Without it, members moved or reserved in one pass would each see the same free room."""
        held = self.holds.get(record.uid)
        if held is not None and held[0] == node:
            return
        self.let_go(record.uid)
        if record.uid in self.in_flight:
            return  # counted as a Binding in flight already (kube-scheduler asked about it while it was being bound)
        if record.needs is not None:
            self.holds[record.uid] = (node, record)
            self._add_in_flight(node, record, +1)
            self.fence.note_hold(record.uid, node)

    def let_go(self, uid: str) -> None:
        """Stop counting a held member (see `hold`)."""
        held = self.holds.pop(uid, None)
        self._untell(uid)
        if held is not None:
            self._add_in_flight(held[0], held[1], -1)
            self.fence.note_hold(uid, None)

    def answer_lone(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """kube-scheduler asks `/filter` for lone GPU pod `record` (under the lock): offered nodes where it would not fit
        beside members held, binding or just bound there (kube-scheduler's own filters may not count them yet) move
        from `nodes` to `failed`, and the fence remembers the answer (`NominationFence.note_answer`)."""
        self._turn_away(record, nodes, failed, self.unseen_check(), "", "beside gang members reserved there")
        self.fence.note_answer(record, nodes)

    def lone_crowded_out(self, record: PodRecord, node: str) -> str:
        """kube-scheduler binds lone GPU pod `record` to `node` through `/bind` (under the lock): "" when it fits there
        beside the members meshfit holds, binds or just bound -- which may have come after its `/filter` answer and
        which kube-scheduler's cache may not count yet -- else why not."""
        if record.needs is None or not self.counts_unseen(node):
            return ""
        reason = self.fits(record, node, self._others_on(node, record), self._busy())
        return f"{reason} beside gang members reserved there" if reason else ""

    def counts_unseen(self, node: str) -> bool:
        """True when meshfit holds or binds members on `node`, or bound one there in the last `RECENT_BIND_SECONDS`:
        room kube-scheduler's cache may not count yet (under the lock)."""
        return self.unseen_check()(node)

    def unseen_check(self) -> Callable[[str], bool]:
        """`counts_unseen` for one pass over many nodes (the clock read once; under the lock)."""
        counted, recent, since = self.in_flight_requests, self.state.recent_binds, self.clock() - RECENT_BIND_SECONDS
        return lambda name: name in counted or recent.get(name, since) > since

    def answer_guard(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """kube-scheduler asks `/guard` about `record`, a pod it places in its own cycle (under the lock): offered nodes
        where it would not fit beside what meshfit holds there, binds there, or bound there in the last
        `RECENT_BIND_SECONDS` (none of which kube-scheduler's cache may count yet) move from `nodes` to `failed`, and
        the fence remembers the answer: a member held on a node after the answer offered it may race this pod
        (`NominationFence.racing`), one held before it was counted in it."""
        self._turn_away(record, nodes, failed, self.unseen_check(), GUARD_REASON_PREFIX,
                        "beside gang members meshfit holds, binds or just bound there")
        self.fence.note_answer(record, nodes)

    def _turn_away(self, record: PodRecord, nodes: list[str], failed: dict[str, str], checked: Callable[[str], bool],
                   prefix: str, beside: str) -> None:
        """Move from `nodes` to `failed` the nodes `checked` selects where `record` does not fit beside this binder's
        members (only refusals starting with `prefix` count)."""
        if record.needs is None or not (self.in_flight_requests or self.state.recent_binds):
            return  # nothing meshfit holds, binds or just bound anywhere: no node to check
        busy, kept = self._busy(), []
        for name in nodes:
            reason = self.fits(record, name, self._others_on(name, record), busy) if checked(name) else ""
            if reason and reason.startswith(prefix):
                failed[name] = f"{reason} {beside}"
            else:
                kept.append(name)
        nodes[:] = kept

    def _forget_old_binds(self) -> None:
        """Drop the nodes of `state.recent_binds` whose last Binding is older than `RECENT_BIND_SECONDS`."""
        since = self.clock() - RECENT_BIND_SECONDS
        recent = self.state.recent_binds
        for node in [n for n, at in recent.items() if at <= since]:
            del recent[node]

    def _kube_assumed(self, node: str, record: PodRecord) -> dict[str, PodRecord]:
        """Members other than `record` that kube-scheduler itself assumed on `node` (told their node at `/filter`):
        what its cache counts there for every pod, whatever the priorities.  The fence sees the node as
        kube-scheduler does: these, bound pods and nominations it honours -- not meshfit's own holds and Bindings
        in flight, which kube-scheduler cannot see yet, nor nominations of a lower priority than the pod it places."""
        found = {}
        for uid in self.told_on.get(node, ()):
            held = self.holds.get(uid)
            if uid != record.uid and held is not None and held[0] == node:
                found[uid] = held[1]
        return found

    def _fence_view(self, node: str, record: PodRecord) -> tuple[dict[str, Any], set[str], dict[str, Any]]:
        """What the fence counts on `node` for `record` besides the node's pods: the summed requests of the members
        kube-scheduler assumed there (`_kube_assumed`), their uids, and what else meshfit puts there that
        kube-scheduler cannot count yet (its other held members, Bindings in flight and kept rooms), which must fit
        beside `record` and a racing pod too."""
        assumed = self._kube_assumed(node, record)
        load = self._requests_of(assumed)
        beside = {r: v - load.get(r, 0) for r, v in self._others_on(node, record).items()}
        return load, set(assumed), beside

    @staticmethod
    def _requests_of(records: dict[str, PodRecord]) -> dict[str, Any]:
        """The summed requests of `records`."""
        total: dict[str, Any] = {}
        for held in records.values():
            for resource, value in held.needs.requests.items():
                total[resource] = total.get(resource, 0) + value
        return total

    def _drop_stale_holds(self) -> None:
        """Let go of held members that are bound, gone, or whose slot is no longer reserved on the held node."""
        for uid, (node, _) in list(self.holds.items()):
            record = self.state.pods.get(uid)
            entry = self.state.ledger.get(record.member.gang_key) if record is not None and record.member else None
            slot = entry.slots.get(record.member.index) if entry is not None else None
            if record is None or record.node or slot is None or slot.node != node \
                    or slot.state not in (SLOT_RESERVED, SLOT_BINDING):
                self.let_go(uid)
            elif uid in self.kube_told and slot.state == SLOT_RESERVED \
                    and self.clock() - self.kube_handling.get(uid, -1e18) > KUBE_TOLD_SECONDS:
                self.kube_let_go(record)  # its /bind never came (the cycle failed after /filter, or the process went)

    def _nominate(self, record: PodRecord, node: str | None) -> None:
        """Write `node` as the pod's nomination (None: clear it) on a worker, unless that write is under way or
        was just accepted and the watch has not shown it yet."""
        if node is not None:
            self.hold(record, node)  # counted there now, not only once the watch shows the nomination
        else:
            self.let_go(record.uid)
        if record.uid in self.nominating:
            return
        written = self.nominated.get(record.uid)
        if node is not None and written is not None and written[0] == node \
                and (self.clock() - written[1] < WATCH_LAG_SECONDS or watch_behind(record, written[2])):
            self._wake_later(record.member.gang_key if record.member else "", WATCH_LAG_SECONDS)
            return
        self.nominating[record.uid] = node or ""
        self._submit(lambda: self._post_nomination(record, node), self._nominations)

    def _post_nomination(self, record: PodRecord, node: str | None) -> None:
        with self.state.lock:
            if node is not None and self._nomination_moot(record):
                self.nominating.pop(record.uid, None)
                self.counts["nominate_skipped"] += 1
                return
        error, version = "", None
        try:
            version = self.nominator.nominate(record.namespace, record.name, record.uid, node)
        except BindConflict as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure: retried with backoff
            error = f"nominating node {node} for pod {record.key} failed: {exc}"
        with self.state.lock:
            self.nominating.pop(record.uid, None)
            if error:
                self.counts["nominate_failed"] += 1
                self._back_off(record, conflict=False)
                log.warning("pod %s: %s", record.key, error, extra={"pod": record.key, "decision": "nominate-failed"})
            elif node is None:
                self.nominated.pop(record.uid, None)
                self.counts["cleared"] += 1
            else:
                self.nominated[record.uid] = (node, self.clock(), version)
                self.counts["nominated"] += 1
            if record.member is not None and not error and node is not None:
                self.member_pending(record)  # in memory the nomination is in the state already

    def _nomination_moot(self, record: PodRecord) -> bool:
        """True when a nomination queued for `record` need not be written any more (call under the lock): the pod is
        gone, bound or terminating, its Binding is in flight, or kube-scheduler was told its node at `/filter` (its
        own cache assumes it there, which is what the nomination was for).  A burst's nominations queue behind each
        other; by a member's turn kube-scheduler has often bound it, and the API server refuses the write."""
        current = self.state.pods.get(record.uid)
        return (current is None or bool(current.node) or current.terminating or record.uid in self.kube_told
                or record.uid in self.in_flight)

    def _clear_stale_nominations(self) -> None:
        """Clear nominations this binder wrote for members whose slot is no longer reserved on that node."""
        for uid, (node, _, _) in list(self.nominated.items()):
            record = self.state.pods.get(uid)
            if record is None or record.node or record.member is None:
                self.nominated.pop(uid, None)
                continue
            entry = self.state.ledger.get(record.member.gang_key)
            slot = entry.slots.get(record.member.index) if entry is not None else None
            if (slot is None or slot.node != node or slot.state not in (SLOT_RESERVED, SLOT_BINDING)) \
                    and record.nominated == node:
                self._nominate(record, None)
