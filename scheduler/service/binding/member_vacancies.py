"""`MemberVacancies`: room kept for a partly bound gang's members that have a slot but no pod meshfit counts yet.

A bound member deleted (evicted, its node lost, a fault) keeps its GPU slot in the reservation ledger for the pod its
controller recreates (`ReservationLedger.hold_for_replacement`); pod 0 must come back to the very node its bound peers
were given as `meshfit.io/master-addr`.  Until the replacement pod exists and is held, nothing else counted the member's
CPU, memory, pods or extended resources on that node, so kube-scheduler placed other pods into that room and the
recreated pod 0 no longer fitted the one node it may use (the 30-minute 1.35 soak, gang mg00851).

So a reserved slot of a gang that has a member bound, whose member no live pod held, binding or bound stands for, is a
*vacancy* (unless its pod is nominated there, which the room ledger counts already): a `reserved` claim of the room
ledger on the slot's node (`scheduler.cache.room_ledger.slot_key`), which `/guard`, `/filter` for lone GPU pods and the
other members' fit checks count, until the member's pod is held, binding or bound there (its own claim replaces the
slot's), or the slot is released or moves.  The requests are the deleted pod's own when meshfit saw it go;
otherwise (a restart, a member never created yet) the largest of its peers' requests, resource by resource.
"""

from __future__ import annotations

from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.room_ledger import MESHFIT_HOLDS, ClaimState, slot_key
from scheduler.gangs.ledger import SLOT_RESERVED
from topology.k8s import FINISHED_PHASES

VacancyKey = tuple[str, int]
"""(gang key, member index)."""


class MemberVacancies:
    """Keeps the room ledger's `reserved` slot claims equal to the vacancies of partly bound gangs (under the lock)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.gone_requests: dict[VacancyKey, dict[str, Any]] = {}
        """(gang key, index) -> requests of a deleted member, for its replacement's vacancy."""

    def member_gone(self, record: PodRecord) -> None:
        """The watch saw a gang member's pod go (after the reservation ledger held its slot for a replacement, or
        released a finished member's): an unfinished member's requests stay counted on the slot's node until the
        replacement is held there; the gang's vacancies are recounted either way."""
        member = record.member
        if member is None:
            return
        if record.needs is not None and record.needs.requests and record.phase not in FINISHED_PHASES:
            self.gone_requests[(member.gang_key, member.index)] = dict(record.needs.requests)
        self.refresh(member.gang_key)

    def counted(self) -> dict[VacancyKey, tuple[str, dict[str, Any]]]:
        """(gang key, index) -> (node, requests) of every vacancy the room ledger counts now."""
        return {(c.gang_key, c.index): (c.node, dict(c.requests)) for c in self.state.room.in_state(ClaimState.RESERVED)}

    def refresh(self, gang_key: str) -> None:
        """Count exactly the vacancies `gang_key` has now, and drop any other gang's whose slot is no longer plainly
        reserved on its node in a partly bound gang (released, moved, bound or unreserved since: by a preemption, a
        rollback, an expiry)."""
        room = self.state.room
        wanted = self._wanted(gang_key)
        for claim in room.in_state(ClaimState.RESERVED):
            if claim.gang_key == gang_key:
                if wanted.get(claim.index) != (claim.node, dict(claim.requests)):
                    room.release_slot(gang_key, claim.index)
            elif not self._still_reserved(claim):
                room.release_slot(claim.gang_key, claim.index)
        for index, (node, requests) in wanted.items():
            if room.claim(slot_key(gang_key, index)) is None:
                room.reserve_slot(gang_key, index, node, requests)
        entry = self.state.ledger.get(gang_key)
        for key in [k for k in self.gone_requests if k[0] == gang_key]:
            slot = entry.slots.get(key[1]) if entry is not None else None
            if slot is None or slot.state != SLOT_RESERVED:  # its replacement is bound, or the slot went
                del self.gone_requests[key]

    def refresh_all(self) -> None:
        """`refresh` every gang that has or may have a vacancy (the periodic pass)."""
        keys = {c.gang_key for c in self.state.room.in_state(ClaimState.RESERVED)} | {k for k, _ in self.gone_requests}
        keys.update(key for key, entry in self.state.ledger.entries.items()
                    if entry.has_bound() and any(s.state == SLOT_RESERVED for s in entry.slots.values()))
        for key in sorted(keys):
            self.refresh(key)

    def _still_reserved(self, claim: Any) -> bool:
        """Whether a vacancy's slot is still plainly reserved on its node in a gang with a member bound or binding."""
        entry = self.state.ledger.get(claim.gang_key)
        slot = entry.slots.get(claim.index) if entry is not None else None
        return slot is not None and slot.state == SLOT_RESERVED and slot.node == claim.node and entry.has_bound()

    def _wanted(self, gang_key: str) -> dict[int, tuple[str, dict[str, Any]]]:
        entry = self.state.ledger.get(gang_key)
        if entry is None or not entry.has_bound():
            return {}
        room = self.state.room
        members = [r for r in self.state.gang_index.get(gang_key, {}).values()
                   if r.member is not None and not r.terminating]
        counted = {r.member.index for r in members if r.node or room.state_of(r.uid) in MESHFIT_HOLDS}
        nominated = {r.member.index: r.nominated for r in members if r.nominated and not r.node}
        wanted, peers = {}, None
        for index, slot in entry.slots.items():
            if slot.state != SLOT_RESERVED or index in counted or nominated.get(index) == slot.node:
                continue  # a pod nominated there is counted by the room ledger already (a `nominated` claim)
            requests = self.gone_requests.get((gang_key, index))
            if requests is None:
                peers = _largest_requests(members) if peers is None else peers
                requests = peers
            if requests:
                wanted[index] = (slot.node, dict(requests))
        return wanted


def _largest_requests(records: list[PodRecord]) -> dict[str, Any]:
    """Resource by resource, the largest request among `records` (those whose needs are known)."""
    largest: dict[str, Any] = {}
    for record in records:
        if record.needs is None:
            continue
        for resource, value in record.needs.requests.items():
            if value > largest.get(resource, 0):
                largest[resource] = value
    return largest
